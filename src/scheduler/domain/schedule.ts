// Moved: what a schedule means is part of the scheduling contract (src/scheduler/contract/schedule.ts).
// This re-export keeps old import paths compiling until they are updated.
export * from '../contract/schedule.ts'
export { DAYS_OF_WEEK as DAY_OF_WEEK_VALUES, EVERY_VALUES, type DayOfWeekName, type Every } from '../contract/enums.ts'
