// The dev chain's saved state, written by us rather than by anvil's own timer. anvil's `--state`
// dumps every N seconds and on exit, so a kill of the whole process group loses the blocks of the
// last interval while the database keeps what it recorded about them; and its dump rewrites the
// file in place, so a kill during it leaves a file that cannot be loaded. Here the state is taken
// with `anvil_dumpState` right after blocks that matter, written to a temporary file, fsynced and
// renamed over the old one: the file on disk is always a whole state, and `durableBlock` is the
// newest block it is known to hold. That is what "final" means on the dev chain: a block that a
// crash of the machine cannot take back.
import { open, rename } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import type { Hex } from 'viem'
import type { ChainLogger } from './types.ts'

export interface DevStatePersister {
  /** The newest block known to be on disk (-1 before the first save of a new chain). */
  readonly durableBlock: bigint
  /** Saves the chain's state now; resolves with the newest block the saved file holds. */
  save(): Promise<bigint>
  /** Resolves once `block` is on disk (saving if it is not yet). */
  through(block: bigint): Promise<bigint>
  /** Saves soon, without waiting (after a write whose block should not stay at risk for long). */
  soon(): void
}

type Rpc = <T>(method: string, params: unknown[]) => Promise<T>

/** Dumps tried before mining is paused for one (and then while paused). */
const QUIET_DUMP_ATTEMPTS = 3
const STILL_MS = 50
const STILL_WITHIN_MS = 10_000

export function createDevStatePersister(deps: {
  rpc: Rpc
  /** anvil_dumpState's answer: the gzipped state, in hex. */
  dump: () => Promise<Hex>
  file: string
  loadedBlock: bigint
  /** Stops whatever else mines on its own (the pool doctor) while a dump pauses automine; returns the release. */
  holdMining?: () => Promise<() => void>
  logger?: ChainLogger | undefined
}): DevStatePersister {
  const { rpc, dump, file, logger } = deps
  let durable = deps.loadedBlock
  let running: Promise<bigint> | undefined
  let next: Promise<bigint> | undefined

  const headNow = async () => BigInt(await rpc<Hex>('eth_blockNumber', []))

  /**
   * A dump no block was mined during. anvil_dumpState reads the block list, then the accounts
   * (after an await): a block mined in between is in the accounts but not in the blocks, and a
   * chain loaded from that file has the block's transfers without their transactions (a refund
   * re-sent as lost was then paid twice). A head unchanged across the dump proves none was mined;
   * a chain too busy for that is dumped with automine paused (sends wait in the pool meanwhile).
   */
  async function quietDump(): Promise<{ head: bigint; dumped: Hex }> {
    /** The dump, if the head read before it is still the head after it. */
    const dumpAt = async (head: bigint) => {
      const dumped = await dump()
      return (await headNow()) === head ? { head, dumped } : undefined
    }
    for (let attempt = 0; attempt < QUIET_DUMP_ATTEMPTS; attempt += 1) {
      const quiet = await dumpAt(await headNow())
      if (quiet) return quiet
    }
    const release = (await deps.holdMining?.()) ?? (() => undefined)
    try {
      await rpc('evm_setAutomine', [false])
      try {
        for (let attempt = 0; attempt < QUIET_DUMP_ATTEMPTS; attempt += 1) {
          // anvil still mines the ready transactions it had taken when automine went off.
          const quiet = await dumpAt(await untilStill())
          if (quiet) return quiet
        }
        throw new Error('the dev chain kept mining during its state dump with automine paused; not saved')
      } finally {
        await rpc('evm_setAutomine', [true])
        // Sends that arrived while paused are mined now: automine takes only new ones.
        await rpc('evm_mine', [])
      }
    } finally {
      release()
    }
  }

  /** The head once it stopped moving (two readings STILL_MS apart agree), within STILL_WITHIN_MS. */
  async function untilStill(): Promise<bigint> {
    const started = Date.now()
    let head = await headNow()
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, STILL_MS))
      const now = await headNow()
      if (now === head || Date.now() - started > STILL_WITHIN_MS) return now
      head = now
    }
  }

  async function saveOnce(): Promise<bigint> {
    const { head, dumped } = await quietDump()
    await writeWhole(file, gunzipSync(Buffer.from(dumped.slice(2), 'hex')))
    // What the file holds now, even below an earlier save (a chain rolled back with evm_revert).
    durable = head
    return durable
  }

  /** One save at a time; a call during a save waits for the next one, which starts after it. */
  function save(): Promise<bigint> {
    if (running === undefined) {
      running = saveOnce().finally(() => {
        running = undefined
      })
      return running
    }
    next ??= running
      .catch(() => undefined)
      .then(() => {
        next = undefined
        return save()
      })
    return next
  }

  return {
    get durableBlock() {
      return durable
    },
    save,
    async through(block) {
      if (durable >= block) return durable
      return save()
    },
    soon() {
      save().catch((error: unknown) => logger?.warn({ err: error }, 'dev chain: could not save its state; retried on the next block'))
    },
  }
}

/** tmp file, fsync, rename, fsync of the directory: the path always names a complete file. */
async function writeWhole(file: string, bytes: Buffer): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`
  const handle = await open(tmp, 'w')
  try {
    await handle.writeFile(bytes)
    await handle.sync()
  } finally {
    await handle.close()
  }
  await rename(tmp, file)
  const dir = await open(path.dirname(file), 'r')
  try {
    await dir.sync()
  } finally {
    await dir.close()
  }
}
