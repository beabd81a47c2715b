// Ranked text search over operations (summary, description, path, slug). BM25 via MiniSearch,
// with the fields an agent types most often (slug, path, summary) boosted over prose.
import MiniSearch from 'minisearch'
import type { CatalogOperation } from './openapi.ts'

interface Indexed {
  id: number
  slug: string
  path: string
  summary: string
  description: string
  operationId: string
  keywords: string
}

// Splits `songmodel-3-pro`, `/api/v1/audio/songs/{id}`, `createTask` into searchable words.
function tokenize(text: string): string[] {
  return text
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9.]+/)
    .flatMap((word) => (word.includes('.') ? [word, ...word.split('.')] : [word]))
    .filter((word) => word.length > 0)
}

// Plural/singular folding keeps "song" and "songs" one term without a stemmer dependency.
function normalize(term: string): string | null {
  if (term.length > 3 && term.endsWith('ies')) return `${term.slice(0, -3)}y`
  if (term.length > 3 && term.endsWith('s') && !term.endsWith('ss')) return term.slice(0, -1)
  return term
}

export interface OperationSearch {
  /** Indexes into the operation list, best first; only operations that match. */
  rank(query: string): number[]
  /** The same ranking with each match's relevance score (BM25, higher is better). */
  scored(query: string): { index: number; score: number }[]
}

export function createOperationSearch(operations: readonly CatalogOperation[]): OperationSearch {
  const index = new MiniSearch<Indexed>({
    fields: ['slug', 'path', 'summary', 'operationId', 'keywords', 'description'],
    tokenize,
    processTerm: normalize,
    searchOptions: {
      boost: { slug: 3, path: 2.5, summary: 2.5, operationId: 2, keywords: 1.5, description: 1 },
      prefix: (term) => term.length >= 3,
      fuzzy: (term) => (term.length >= 5 ? 0.2 : false),
      combineWith: 'OR',
    },
  })
  index.addAll(
    operations.map((entry, id) => ({
      id,
      slug: entry.spec.service,
      path: entry.spec.path,
      summary: entry.spec.summary,
      description: entry.spec.description,
      operationId: entry.spec.operationId,
      keywords: (entry.spec.keywords ?? []).join(' '),
    })),
  )
  // Stable order for equal scores: registry order.
  const scored = (query: string): { index: number; score: number }[] =>
    index
      .search(query)
      .map((hit) => ({ index: hit.id as number, score: hit.score }))
      .sort((a, b) => b.score - a.score || a.index - b.index)
  return {
    scored,
    rank: (query) => scored(query).map((hit) => hit.index),
  }
}
