# Developer entry points. Everything runs on the project's own Node 24 (node_modules/.bin/node).
.PHONY: install start test typecheck unit bench clean

install:
	npm install

start:
	npm start

test:
	npm test

typecheck:
	npm run typecheck

unit:
	npx tap test/unit/*.test.ts

bench:
	npm run bench

clean:
	rm -rf .agent-gateway .tap
