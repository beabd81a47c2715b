// The gateway operations this build answers (a module of its own: listing them loads no handler).
import { REVIEW_OPERATIONS } from '../reviews/operations.ts'

/** Operations this role answers today; the rest of the gateway's registry answers 501. */
export const GATEWAY_OPERATIONS = [
  'getAgentGuide',
  'postAgentGuide',
  'postAgentQuote',
  'registerAgent',
  'startAgentClaim',
  'verifyAgentClaim',
  'purchasePlan',
  'generateSongs',
  'synthesizeSpeech',
  ...REVIEW_OPERATIONS,
] as const
