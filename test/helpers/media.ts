// A media client for gateway tests that do not generate audio: every call is refused with the
// media role's 503, as a gateway whose media role is down would answer.
import { AppError } from '../../src/platform/errors.ts'
import type { MediaClient } from '../../src/media/service.ts'

export const mediaDown: MediaClient = {
  songs: async () => {
    throw new AppError('media_unavailable', 'no media role in this test')
  },
  speech: async () => {
    throw new AppError('media_unavailable', 'no media role in this test')
  },
}
