// The memory role: the memory service and its money (src/memory/role.ts) behind the memory
// listener. Dreaming, when configured, runs on the process's job queue.
import { stuckRefunds } from '../payments/refunds.ts'
import { early, paid, serviceAppDeps, type RoleModule } from './context.ts'

export const memoryRole: RoleModule = {
  name: 'memory',
  takesPayments: true,
  wants: (_config, roles) => roles.includes('memory'),
  preload() {
    const appModule = early(import('../memory/app.ts'))
    const roleModule = early(import('../memory/role.ts'))
    return {
      async open(context) {
        const { config, db, logger } = context
        const { payments } = paid(context)
        const { openMemoryRole } = await roleModule
        const memory = await openMemoryRole({ config, db, clock: context.clock, logger, payments, jobs: () => context.jobs() })
        try {
          if (context.orphanedBefore) await memory.money.refunds.resumeOrphans(context.orphanedBefore)
        } catch (error) {
          await memory.stop().catch(() => {})
          throw error
        }
        const standing = () => memory.money.refunds.standing()
        const { buildMemoryApp } = await appModule
        return {
          refundStandings: [standing],
          loops: [{ name: 'memory refund pass', everyMs: 15_000, run: () => memory.money.refunds.retryDue() }],
          diagnostics: { memoryRefunds: () => stuckRefunds({ standing }) },
          listeners: [
            {
              name: 'memory',
              port: config.memoryPort,
              diagnostics: { memory: async () => memory.describe() },
              build: (probes) => {
                const app = buildMemoryApp({ ...serviceAppDeps(context, probes), payments, kv: context.kv, service: memory.service, money: memory.money })
                context.localApps.set('memory', app)
                return app
              },
            },
          ],
          stop: () => memory.stop(),
        }
      },
    }
  },
}
