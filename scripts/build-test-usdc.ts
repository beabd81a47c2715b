// Compiles src/payments/chain/contracts/TestUSDC.sol with solc (wasm, offline) and writes
// TestUSDC.json ({abi, deployedBytecode, ...}) next to it. Run after editing the .sol:
//   npm run build:contracts
// The JSON is committed: the runtime (src/payments/chain/dev.ts) loads it and never needs solc.
import { createHash } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import solc from 'solc'

const contractsDir = new URL('../src/payments/chain/contracts/', import.meta.url)
const SOURCE_NAME = 'TestUSDC.sol'
const CONTRACT = 'TestUSDC'
// Pinned so the bytecode runs on any post-Dencun EVM (anvil's default hardfork moves forward).
const EVM_VERSION = 'cancun'

interface SolcError {
  severity: 'error' | 'warning' | 'info'
  formattedMessage: string
}
interface SolcOutput {
  errors?: SolcError[]
  contracts?: Record<string, Record<string, { abi: unknown[]; evm: { deployedBytecode: { object: string } } }>>
}

const started = performance.now()
const source = await readFile(new URL(SOURCE_NAME, contractsDir), 'utf8')
const input = {
  language: 'Solidity',
  sources: { [SOURCE_NAME]: { content: source } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: EVM_VERSION,
    // No CBOR metadata hash: the bytecode depends only on the source and settings.
    metadata: { bytecodeHash: 'none', appendCBOR: false },
    outputSelection: { [SOURCE_NAME]: { [CONTRACT]: ['abi', 'evm.deployedBytecode.object'] } },
  },
}
const output = JSON.parse(solc.compile(JSON.stringify(input)) as string) as SolcOutput
const problems = output.errors ?? []
for (const p of problems) console.error(p.formattedMessage)
if (problems.some((p) => p.severity === 'error')) process.exit(1)

const compiled = output.contracts?.[SOURCE_NAME]?.[CONTRACT]
if (!compiled) throw new Error(`solc produced no ${CONTRACT}`)
const artifact = {
  contractName: CONTRACT,
  compiler: `solc ${solc.version() as string}`,
  evmVersion: EVM_VERSION,
  sourceSha256: createHash('sha256').update(source).digest('hex'),
  abi: compiled.abi,
  deployedBytecode: `0x${compiled.evm.deployedBytecode.object}`,
}
const outFile = new URL(`${CONTRACT}.json`, contractsDir)
await writeFile(outFile, `${JSON.stringify(artifact, null, 2)}\n`)
console.log(
  `wrote ${fileURLToPath(outFile)}: ${(artifact.deployedBytecode.length - 2) / 2} bytes of runtime code, ` + `${artifact.compiler}, ${Math.round(performance.now() - started)} ms`,
)
