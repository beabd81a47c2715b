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

.PHONY: kind-e2e helm-lint crds
crds:
	npm run gen:crds

kind-e2e:
	scripts/kind-e2e.sh

helm-lint:
	helm=$$(node_modules/.bin/node --input-type=module -e "const m = await import('./test/helpers/kube-tools.ts'); console.log(await m.helmPath())") && \
	$$helm lint --strict charts/agent-gateway && \
	$$helm lint --strict charts/agent-gateway -f charts/agent-gateway/ci/all-enabled-values.yaml
