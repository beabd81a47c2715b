// The memory operations this build answers (a module of its own: listing them loads no handler).
export const MEMORY_OPERATIONS = ['rememberMemory', 'depositMemoryFunds', 'recallMemories', 'expandMemories', 'getMemoryAccount', 'withdrawMemoryDeposit'] as const
