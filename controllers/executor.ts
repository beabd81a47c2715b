// Moved: the RunExecutor port is part of the scheduling contract (src/scheduler/contract/ports.ts).
// This re-export keeps old import paths compiling until they are updated.
export type { ExecutionOutcome, ExecutionRequest, ExecutionResult, RunExecutor } from '../src/scheduler/contract/index.ts'
