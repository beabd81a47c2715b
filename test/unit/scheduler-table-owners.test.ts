// One owner per scheduler table, read from the sources (src/ and controllers/, comments included,
// as `grep -rl` sees them; the migrations define the tables and are left out):
// - scheduler_tasks is named only by task-store.ts, and by the joins of run-store.ts (a run with
//   its task) and escrow-store.ts (the escrow's reads);
// - scheduler_runs is named only by run-store.ts, and by the escrow's reads in escrow-store.ts;
// - only task-store.ts writes scheduler_tasks and only run-store.ts writes scheduler_runs.
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/import-scan.ts'

const SCHEDULER = path.join('src', 'scheduler')
const TASK_STORE = path.join(SCHEDULER, 'task-store.ts')
const RUN_STORE = path.join(SCHEDULER, 'run-store.ts')
const ESCROW_STORE = path.join(SCHEDULER, 'escrow-store.ts')
const MIGRATIONS = path.join('src', 'migrations')

/** Every file under `dir` (relative to the repository), the migrations left out. */
function filesUnder(dir: string): string[] {
  return readdirSync(path.join(REPO_ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = path.join(dir, entry.name)
    if (entry.isDirectory()) return relative === MIGRATIONS || entry.name === 'node_modules' ? [] : filesUnder(relative)
    return [relative]
  })
}

const sources = new Map(['src', 'controllers'].flatMap(filesUnder).map((file) => [file, readFileSync(path.join(REPO_ROOT, file), 'utf8')]))

const naming = (table: string) => [...sources].filter(([, text]) => text.includes(table)).map(([file]) => file)

/** Whether `text` holds a statement that writes `table`. */
function writes(text: string, table: string): boolean {
  return new RegExp(`\\b(?:insert\\s+into|update|delete\\s+from)\\s+${table}\\b`, 'i').test(text)
}

const writing = (table: string) => [...sources].filter(([, text]) => writes(text, table)).map(([file]) => file)

t.test('the write detector sees inserts, updates and deletes, and not reads', async (t) => {
  t.ok(writes('insert into scheduler_tasks (id) values ($1)', 'scheduler_tasks'))
  t.ok(writes('update scheduler_runs r set token_hash = u.hash', 'scheduler_runs'))
  t.ok(writes('DELETE FROM scheduler_runs where id = $1', 'scheduler_runs'))
  t.notOk(writes('select * from scheduler_tasks where id = $1 for update', 'scheduler_tasks'))
  t.notOk(writes('select r.* from scheduler_runs r join scheduler_tasks t on t.id = r.task_id', 'scheduler_tasks'))
  t.notOk(writes('update scheduler_tasks_archive set x = 1', 'scheduler_tasks'))
})

t.test('scheduler_tasks is named by its store and the joins of the run and escrow stores only', async (t) => {
  t.ok(sources.size > 100, 'the sources were read')
  t.same(naming('scheduler_tasks').sort(), [ESCROW_STORE, RUN_STORE, TASK_STORE].sort())
})

t.test('scheduler_runs is named by its store and the escrow store only', async (t) => {
  t.same(naming('scheduler_runs').sort(), [ESCROW_STORE, RUN_STORE].sort())
})

t.test('each table is written by its own store only', async (t) => {
  t.same(writing('scheduler_tasks'), [TASK_STORE])
  t.same(writing('scheduler_runs'), [RUN_STORE])
})
