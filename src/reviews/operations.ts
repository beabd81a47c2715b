// The review operations this build answers (a module of its own: listing them loads no handler).
export const REVIEW_OPERATIONS = ['createReviewSession', 'getReviewSession', 'submitReview'] as const
