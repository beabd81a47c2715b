// Dev adapter of the chain port: a local anvil (chain id 8453) with TestUSDC's runtime code at
// the canonical Base USDC address, driven by the SAME rpc adapter as production, plus a faucet.
//
// Process hygiene: anvil is spawned directly (the platform binary, not the npm node wrapper, so
// the pid we signal is anvil itself) and is never left behind:
//   - close(): the state is saved (dev-state.ts), then SIGTERM, wait, SIGKILL after a timeout;
//   - the parent exits normally / throws: a process 'exit' hook SIGTERMs every live anvil;
//   - the parent dies hard (SIGKILL, OOM, a runner's SIGTERM): a tiny `sh` watchdog per anvil
//     holds the read end of a pipe whose only writer is the parent; the kernel closes it when the
//     parent dies, `read` sees EOF, and the watchdog SIGTERMs anvil (SIGKILL after 5 s).
// The child and the pipes are unref'd, so a forgotten close() never keeps the parent alive.
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createPublicClient, custom, encodeFunctionData, getAddress, type PublicClient } from 'viem'
import { startPoolDoctor, type PoolDoctor } from './dev-pool-doctor.ts'
import { createDevStatePersister, type DevStatePersister } from './dev-state.ts'
import { localRpcClient } from './local-rpc.ts'
import type { Address, Hex } from 'viem'
import artifact from './contracts/TestUSDC.json' with { type: 'json' }
import { waitForReceipt } from './receipt.ts'
import { createRpcChain } from './rpc.ts'
import type { ChainLogger, DevChain } from './types.ts'
import { BASE_CHAIN_ID, BASE_USDC, testUsdcFaucetAbi } from './usdc-abi.ts'

/** anvil's well-known dev account #0 (public knowledge: never use it on a real network). */
export const ANVIL_ACCOUNT_0_KEY: Hex = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80'
/** Impersonated sender of faucet mints: keeps mints off the service wallet's nonce sequence. */
const FAUCET_SENDER: Address = getAddress('0x000000000000000000000000000000000000fa0c')
const TEST_USDC_CODE = artifact.deployedBytecode as Hex
const STATE_FILE = 'anvil-state.json'
/** How long one anvil_dumpState may take. */
const DUMP_TIMEOUT_MS = 120_000
const PID_FILE = 'anvil.pid'

export interface DevChainOptions {
  /** Persist chain state in `<dataDir>/anvil-state.json` across restarts. Default: in memory. */
  dataDir?: string
  /** Default: a free port on 127.0.0.1. */
  port?: number
  /** Service wallet; default anvil account #0 (has ETH for gas, needs no USDC to settle). */
  serviceKey?: Hex
  logger?: ChainLogger
  /** Blocks a transaction needs before it is final (with a dataDir, it must also be saved); default 1. */
  confirmations?: number
  /** Readiness deadline; default 15 000 ms. */
  startTimeoutMs?: number
  /** Default receipt wait of settle/transfer; default 30 000 ms. */
  confirmationTimeoutMs?: number
  /** Override the anvil binary (default: @foundry-rs/anvil's platform binary). */
  anvilPath?: string
}

/** A started dev chain; `pid` is anvil's process id. */
export type StartedDevChain = DevChain & {
  readonly pid: number
  readonly stateFile: string | undefined
  /** Saves the chain's state now (as after each write); resolves with the newest block the file holds. */
  saveState(): Promise<bigint>
}

// --- one 'exit' hook for all live anvils of this process ---
const live = new Set<ChildProcess>()
let exitHookInstalled = false
function track(child: ChildProcess): void {
  live.add(child)
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const c of live) {
      try {
        c.kill('SIGTERM')
      } catch {
        // already gone
      }
    }
  })
}

export async function startDevChain(options: DevChainOptions = {}): Promise<StartedDevChain> {
  const started = performance.now()
  const log = options.logger
  const bin = options.anvilPath ?? resolveAnvil(log)
  const stateFile = options.dataDir ? path.resolve(options.dataDir, STATE_FILE) : undefined
  if (options.dataDir) await mkdir(options.dataDir, { recursive: true })
  // The anvil of a process that was just killed may still be running (its watchdog SIGTERMed it):
  // two chains on one state file would each be the truth for a moment.
  if (options.dataDir) await waitForPreviousAnvil(path.resolve(options.dataDir, PID_FILE), log)

  // A picked free port can be taken before anvil binds it: retry with another one.
  let anvil: AnvilProcess | undefined
  for (let attempt = 0; anvil === undefined; attempt++) {
    const port = options.port ?? (await freePort())
    // Historical states in memory only: anvil writes older ones to ~/.foundry/anvil/tmp and removes
    // them on a clean exit only, so every kill left its cache behind (75 GB after three 30-minute
    // topology drills). Nothing here reads a state older than the few it keeps.
    const args = ['--host', '127.0.0.1', '--port', String(port), '--chain-id', String(BASE_CHAIN_ID), '--quiet', '--max-persisted-states', '0']
    // Loaded only: the saves are ours (dev-state.ts), whole files written right after each block that matters.
    if (stateFile && existsSync(stateFile)) args.push('--load-state', stateFile)
    try {
      anvil = await launch(bin, args, port, options.startTimeoutMs ?? 15_000)
    } catch (err) {
      const portClash = err instanceof Error && /address already in use|addrinuse|os error 98/i.test(err.message)
      if (!portClash || options.port !== undefined || attempt >= 3) throw err
    }
  }
  const proc = anvil
  const { child, rpcUrl } = proc
  const pid = child.pid as number
  if (options.dataDir) await writeFile(path.resolve(options.dataDir, PID_FILE), `${pid}\n`)
  const bootMs = Math.round(performance.now() - started)

  const local = localRpcClient(rpcUrl, { timeoutMs: 5_000 })
  try {
    const rpc = local.call
    // viem's client for the faucet's receipt wait only, over the same connections.
    let receipts: PublicClient | undefined
    const receiptClient = (): PublicClient =>
      (receipts ??= createPublicClient({
        transport: custom({ request: ({ method, params }) => local.call(method, (params ?? []) as unknown[]) }, { retryCount: 0 }),
        pollingInterval: 20,
      }))
    const confirmations = Math.max(1, Math.floor(options.confirmations ?? 1))
    // Started after the persister: a save before it has no doctor to hold.
    let doctor: PoolDoctor | undefined
    // What was loaded is on disk already; a new chain has nothing of ours until the first save.
    const persister: DevStatePersister | undefined = stateFile
      ? createDevStatePersister({
          rpc,
          dump: () => local.call<Hex>('anvil_dumpState', [], { timeoutMs: DUMP_TIMEOUT_MS }),
          file: stateFile,
          loadedBlock: BigInt(await rpc<Hex>('eth_blockNumber', [])),
          holdMining: async () => (await doctor?.hold()) ?? (() => undefined),
          logger: log,
        })
      : undefined
    const chain = createRpcChain({
      rpcUrl,
      privateKey: options.serviceKey ?? ANVIL_ACCOUNT_0_KEY,
      chainId: BASE_CHAIN_ID,
      usdc: BASE_USDC,
      confirmationTimeoutMs: options.confirmationTimeoutMs,
      pollingIntervalMs: 20,
      requestTimeoutMs: 5_000,
      confirmations,
      // Final on the dev chain = deep enough and saved: a kill of the whole machine cannot take it back.
      ...(persister
        ? {
            finalBlock: async (head: bigint, needed: bigint) => {
              // A save that already holds `needed` answers for it: no save per question under load.
              const saved = await persister.through(needed)
              const deep = head - BigInt(confirmations - 1)
              return saved < deep ? saved : deep
            },
          }
        : {}),
      logger: log,
    })
    /** A write's block is saved right after it, so a crash loses as little as it can. */
    const saved = <T>(result: Promise<T>): Promise<T> =>
      result.finally(() => {
        persister?.soon()
      })

    // TestUSDC at the canonical address: absent on a fresh chain, kept by a state load.
    const code = await rpc<Hex>('eth_getCode', [BASE_USDC, 'latest'])
    if (code.toLowerCase() !== TEST_USDC_CODE.toLowerCase()) {
      if (code !== '0x') log?.warn({ usdc: BASE_USDC }, 'dev chain: replacing stale TestUSDC code (storage kept)')
      await rpc('anvil_setCode', [BASE_USDC, TEST_USDC_CODE])
    }
    await rpc('anvil_impersonateAccount', [FAUCET_SENDER])
    await rpc('anvil_setBalance', [FAUCET_SENDER, '0x3635c9adc5dea00000']) // 1000 ETH for gas
    doctor = startPoolDoctor({ rpc, impersonated: [FAUCET_SENDER], logger: log })

    let mintQueue: Promise<unknown> = Promise.resolve()
    let closing: Promise<void> | undefined

    const dev: StartedDevChain = {
      kind: 'dev',
      rpcUrl,
      pid,
      stateFile,
      saveState: () => (persister ? persister.save() : Promise.reject(new Error('the dev chain has no data directory: nothing to save'))),
      chainId: chain.chainId,
      usdc: chain.usdc,
      serviceAddress: chain.serviceAddress,
      confirmations,
      settleAuthorization: (auth, signature, opts) => saved(chain.settleAuthorization(auth, signature, opts)),
      inclusion: (txHash, expected) => chain.inclusion(txHash, expected),
      async authorizationFate(from, nonce, validBefore) {
        const fate = await chain.authorizationFate(from, nonce, validBefore)
        if (fate !== 'open' || BigInt(Math.floor(Date.now() / 1000)) < validBefore) return fate
        // anvil mines only when a transaction arrives, so its clock stands still while idle: an
        // empty block brings it to now, and an expired authorization is then seen as dead.
        await rpc('evm_mine', [])
        return chain.authorizationFate(from, nonce, validBefore)
      },
      settlementStatus: (txHash) => chain.settlementStatus(txHash),
      transactionKnown: (txHash) => chain.transactionKnown(txHash),
      isAuthorizationUsed: (from, nonce) => chain.isAuthorizationUsed(from, nonce),
      findAuthorizationTx: (from, nonce) => chain.findAuthorizationTx(from, nonce),
      transfer: (to, amount, opts) => saved(chain.transfer(to, amount, opts)),
      resend: (tx, expected, opts) => saved(chain.resend(tx, expected, opts)),
      balanceOf: (address) => chain.balanceOf(address),

      mint(to, amount) {
        // Serialized: anvil picks the impersonated sender's nonce per eth_sendTransaction.
        const run = mintQueue.then(async () => {
          const data = encodeFunctionData({ abi: testUsdcFaucetAbi, functionName: 'mint', args: [to, amount] })
          const hash = await rpc<Hex>('eth_sendTransaction', [{ from: FAUCET_SENDER, to: BASE_USDC, data }])
          const receipt = await waitForReceipt(receiptClient(), hash, { timeoutMs: 30_000, directEveryMs: 100 }).catch(async (error: unknown) => {
            // What the node holds of it, so that a mint that never lands says why.
            const seen = await Promise.all([
              rpc('txpool_status', []).catch(String),
              rpc('eth_getTransactionByHash', [hash]).catch(String),
              rpc('eth_blockNumber', []).catch(String),
            ])
            throw new Error(`mint ${hash} not mined: ${(error as Error).message}; pool, transaction, head: ${JSON.stringify(seen).slice(0, 1500)}`)
          })
          if (receipt.status !== 'success') throw new Error(`mint reverted (${hash})`)
          // The faucet answers once the money is on disk: a crash after it cannot take it back.
          await persister?.through(receipt.blockNumber)
          return hash
        })
        mintQueue = run.catch(() => undefined)
        return run
      },

      close() {
        closing ??= (async () => {
          await doctor.stop()
          await chain.close()
          // The last save holds every block: tried twice before the chain stops without it, and then
          // said (the next start loads an older state, whose missing settlements the sweep re-decides).
          await persister
            ?.save()
            .catch(() => persister.save())
            .catch((error: unknown) => log?.error({ err: error }, 'dev chain: could not save its state before stopping; the next start loads an older one'))
          await proc.stop(log)
          local.close()
        })()
        return closing
      },
    }
    log?.info({ rpcUrl, pid, stateFile, ms: bootMs }, 'dev chain started')
    return dev
  } catch (err) {
    local.close()
    await proc.stop(log)
    throw err
  }
}

interface AnvilProcess {
  child: ChildProcess
  rpcUrl: string
  stop(log?: ChainLogger): Promise<void>
}

/** Spawns anvil + its parent-death watchdog and waits until it answers eth_chainId. */
async function launch(bin: string, args: string[], port: number, timeoutMs: number): Promise<AnvilProcess> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  const output: string[] = []
  const keep = (chunk: Buffer): void => {
    output.push(chunk.toString('utf8'))
    if (output.length > 50) output.shift()
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  let spawnError: Error | undefined
  child.once('error', (err) => {
    spawnError = err
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const isAlive = (): boolean => child.exitCode === null && child.signalCode === null && spawnError === undefined

  const watchdog = child.pid !== undefined && process.platform !== 'win32' ? startWatchdog(child.pid) : undefined
  void exited.then(() => {
    live.delete(child)
    watchdog?.kill('SIGKILL')
  })
  track(child)
  // Never keep the parent alive for anvil's sake (the exit hook / watchdog clean up).
  child.unref()
  unrefStream(child.stdout)
  unrefStream(child.stderr)

  let stopping: Promise<void> | undefined
  const stop = (log?: ChainLogger): Promise<void> => {
    stopping ??= (async () => {
      if (!isAlive()) return
      child.ref() // wait for the state dump even if nothing else keeps the loop alive
      child.kill('SIGTERM')
      if (!(await within(exited, 10_000))) {
        log?.warn({ pid: child.pid }, 'anvil ignored SIGTERM for 10 s, killing')
        child.kill('SIGKILL')
        await within(exited, 5_000)
      }
      child.unref()
    })()
    return stopping
  }

  const rpcUrl = `http://127.0.0.1:${port}`
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (!isAlive()) {
      await within(exited, 1_000)
      const why = spawnError?.message ?? `exit code ${child.exitCode ?? child.signalCode}`
      throw new Error(`anvil failed to start (${why}): ${output.join('').trim().slice(-2_000)}`)
    }
    if ((await chainIdAt(rpcUrl)) === BASE_CHAIN_ID && isAlive()) return { child, rpcUrl, stop }
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`anvil did not answer on ${rpcUrl} within ${timeoutMs} ms: ${output.join('').trim().slice(-2_000)}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 15))
  }
}

/**
 * `sh` that waits for EOF on its stdin (a pipe only this process writes to), then stops anvil.
 * EOF happens exactly when this process dies, however it dies. On a normal close() the
 * watchdog is SIGKILLed once anvil has exited, so it never signals a recycled pid.
 */
function startWatchdog(pid: number): ChildProcess | undefined {
  const script = [
    'read -r _ignored',
    'kill -TERM "$1" 2>/dev/null || exit 0',
    'i=0',
    'while kill -0 "$1" 2>/dev/null; do',
    '  i=$((i+1)); if [ "$i" -ge 50 ]; then kill -KILL "$1" 2>/dev/null; exit 0; fi',
    '  sleep 0.1',
    'done',
  ].join('\n')
  try {
    const watchdog = spawn('/bin/sh', ['-c', script, 'anvil-watchdog', String(pid)], { stdio: ['pipe', 'ignore', 'ignore'] })
    watchdog.on('error', () => undefined)
    watchdog.unref()
    unrefStream(watchdog.stdin)
    return watchdog
  } catch {
    return undefined
  }
}

function unrefStream(stream: unknown): void {
  const s = stream as { unref?: () => void } | null
  s?.unref?.()
}

async function within(p: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([p.then(() => true as const), timeout])
  } finally {
    clearTimeout(timer)
  }
}

async function chainIdAt(rpcUrl: string): Promise<number | undefined> {
  const probe = localRpcClient(rpcUrl, { timeoutMs: 1_000 })
  try {
    return Number.parseInt(await probe.call<string>('eth_chainId', []), 16)
  } catch {
    return undefined
  } finally {
    probe.close()
  }
}

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** The platform binary of @foundry-rs/anvil, resolved from this file (not the cwd). */
function resolveAnvil(log?: ChainLogger): string {
  const require = createRequire(import.meta.url)
  const os = ({ linux: 'linux', darwin: 'darwin', win32: 'win32' } as Record<string, string>)[process.platform]
  const cpu = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch]
  const exe = process.platform === 'win32' ? 'anvil.exe' : 'anvil'
  if (os && cpu) {
    try {
      return require.resolve(`@foundry-rs/anvil-${os}-${cpu}/bin/${exe}`)
    } catch {
      // fall back to the npm wrapper
    }
  }
  // The wrapper is a node script that re-spawns the binary: SIGKILLing it would orphan anvil.
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const wrapper = path.join(dir, 'node_modules', '.bin', 'anvil')
    if (existsSync(wrapper)) {
      log?.warn({ wrapper }, 'anvil platform binary not found, using the npm wrapper')
      return wrapper
    }
    if (path.dirname(dir) === dir) break
  }
  throw new Error('anvil not found: npm install @foundry-rs/anvil')
}

/**
 * Waits until the anvil recorded in `pidFile` (a previous process's, on the same state file) has
 * exited: up to 5 s on its own (its watchdog asked it to stop), then SIGTERM, SIGKILL after 15 s.
 * A pid that is not an anvil any more (recycled) is left alone.
 */
async function waitForPreviousAnvil(pidFile: string, log?: ChainLogger): Promise<void> {
  const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim())
  if (!Number.isInteger(pid) || pid <= 0) return
  const isAnvil = async () => {
    try {
      process.kill(pid, 0)
    } catch {
      return false
    }
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined)
    return cmdline === undefined || cmdline.includes('anvil')
  }
  const started = Date.now()
  while (await isAnvil()) {
    const waited = Date.now() - started
    if (waited > 15_000) {
      process.kill(pid, 'SIGKILL')
    } else if (waited > 5_000) {
      process.kill(pid, 'SIGTERM')
    }
    if (waited > 20_000) throw new Error(`the previous anvil (pid ${pid}) does not exit`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  if (Date.now() - started > 100) log?.info({ pid, ms: Date.now() - started }, 'dev chain: waited for the previous anvil to exit')
}
