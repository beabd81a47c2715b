// What each script runtime offers a task, on every executor (the local sandbox, the runner images):
// the libraries preinstalled (a task must not list them as dependencies; the runner images and the
// local prerequisites check install and look for exactly these) and the entrypoint file endings.
import type { Runtime } from './scheduler-vocabulary.ts'

export const PREINSTALLED: Readonly<Record<Runtime, readonly string[]>> = {
  python: ['requests', 'httpx', 'feedparser', 'beautifulsoup4', 'lxml', 'python-dateutil', 'pyyaml', 'pillow'],
  node: ['axios', 'node-fetch', 'cheerio', 'date-fns', 'yaml', 'sharp'],
}

export const ENTRYPOINT_EXTENSIONS: Readonly<Record<Runtime, readonly string[]>> = {
  python: ['.py'],
  node: ['.js', '.mjs', '.cjs'],
}
