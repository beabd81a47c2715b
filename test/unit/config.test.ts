import os from 'node:os'
import t from 'tap'
import { configTable, configVariables, loadConfig } from '../../src/platform/config.ts'
import { isCron } from '../../src/platform/config/readers.ts'
import { DEFAULT_DREAM_CRON } from '../../src/platform/config/variables.ts'

const TOKEN = 'm'.repeat(32)

t.test('defaults', async (t) => {
  const config = loadConfig({}, '/srv')
  t.equal(config.gatewayPort, 4020)
  t.equal(config.schedulerPort, 4021)
  t.equal(config.host, '127.0.0.1')
  t.equal(config.dataDir, '/srv/.agent-gateway')
  t.equal(config.databaseUrl, undefined)
  t.equal(config.redisUrl, undefined)
  t.equal(config.publicBaseUrl, 'http://127.0.0.1:4020')
  t.equal(config.publicSchedulerUrl, 'http://127.0.0.1:4021')
  t.equal(config.otlpEndpoint, undefined)
})

t.test('overrides', async (t) => {
  const config = loadConfig({
    GATEWAY_PORT: '8080',
    SCHEDULER_PORT: '8081',
    DATA_DIR: '/data',
    DATABASE_URL: 'postgres://u@db:5432/x',
    REDIS_URL: 'redis://cache:6379',
    PUBLIC_BASE_URL: 'https://api.example.com/',
    PUBLIC_SCHEDULER_URL: 'https://scheduler.example.com',
  })
  t.equal(config.gatewayPort, 8080)
  t.equal(config.schedulerPort, 8081)
  t.equal(config.dataDir, '/data')
  t.equal(config.databaseUrl, 'postgres://u@db:5432/x')
  t.equal(config.redisUrl, 'redis://cache:6379')
  t.equal(config.publicBaseUrl, 'https://api.example.com', 'trailing slash dropped')
  t.equal(config.publicSchedulerUrl, 'https://scheduler.example.com')
})

t.test('a bad variable is named in the error', async (t) => {
  const cases: [Record<string, string>, string][] = [
    [{ GATEWAY_PORT: 'eighty' }, 'GATEWAY_PORT'],
    [{ SCHEDULER_PORT: '70000' }, 'SCHEDULER_PORT'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{ REDIS_URL: 'not a url' }, 'REDIS_URL'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ BODY_LIMIT_BYTES: '-1' }, 'BODY_LIMIT_BYTES'],
    [{ PAY_TO_ADDRESS: '0x123' }, 'PAY_TO_ADDRESS'],
    [{ BLOB_STORE: 'gcs' }, 'BLOB_STORE'],
    [{ BLOB_STORE: 's3' }, 'S3_BUCKET'],
    [{ BLOB_STORE: 's3', S3_BUCKET: 'a b' }, 'S3_BUCKET'],
    [{ S3_ENDPOINT: 'minio:9000' }, 'S3_ENDPOINT'],
    [{ S3_ENDPOINT: 'ftp://minio:9000' }, 'S3_ENDPOINT'],
    [{ S3_REGION: 'US East' }, 'S3_REGION'],
    [{ S3_PREFIX: '../up' }, 'S3_PREFIX'],
    [{ S3_PREFIX: 'a//b' }, 'S3_PREFIX'],
    [{ S3_FORCE_PATH_STYLE: 'yes' }, 'S3_FORCE_PATH_STYLE'],
    [{ S3_ACCESS_KEY_ID: 'AKIA' }, 'S3_SECRET_ACCESS_KEY'],
    [{ S3_SECRET_ACCESS_KEY: 'secret' }, 'S3_ACCESS_KEY_ID'],
    [{ PUBLIC_MEDIA_URL: 'cdn.example.com' }, 'PUBLIC_MEDIA_URL'],
    [{ MEDIA_URL: 'http://agw-media:4023' }, 'MEDIA_INTERNAL_TOKEN'],
    [{ MEDIA_URL: 'agw-media:4023', MEDIA_INTERNAL_TOKEN: TOKEN }, 'MEDIA_URL'],
    [{ MEDIA_INTERNAL_TOKEN: 'short' }, 'MEDIA_INTERNAL_TOKEN'],
    [{ MEDIA_INTERNAL_TOKEN: `${TOKEN} with spaces` }, 'MEDIA_INTERNAL_TOKEN'],
    [{ SONG_UPSTREAM_URL: 'songs.example.com' }, 'SONG_UPSTREAM_URL'],
    [{ SPEECH_UPSTREAM_URL: 'file:///tts' }, 'SPEECH_UPSTREAM_URL'],
    [{ MEDIA_UPSTREAM_TIMEOUT_MS: '0' }, 'MEDIA_UPSTREAM_TIMEOUT_MS'],
    [{ MEDIA_UPSTREAM_TIMEOUT_MS: '2m' }, 'MEDIA_UPSTREAM_TIMEOUT_MS'],
    [{ MEDIA_UPSTREAM_RETRIES: '-1' }, 'MEDIA_UPSTREAM_RETRIES'],
    [{ MEDIA_UPSTREAM_RETRIES: '11' }, 'MEDIA_UPSTREAM_RETRIES'],
    [{ MEDIA_CONCURRENCY: '0' }, 'MEDIA_CONCURRENCY'],
    [{ MEDIA_ANALYSIS_THREADS: '0' }, 'MEDIA_ANALYSIS_THREADS'],
    [{ MEDIA_ANALYSIS_THREADS: 'all' }, 'MEDIA_ANALYSIS_THREADS'],
    [{ SONG_UPSTREAM_URL: 'https://user:secret@songs.example.com' }, 'SONG_UPSTREAM_URL'],
    [{ MEMORY_EMBEDDINGS_URL: 'https://key@embed.example.com' }, 'MEMORY_EMBEDDINGS_URL'],
    [{ MEMORY_EMBEDDINGS_URL: 'https://embed.example.com', MEMORY_EMBEDDINGS_MODEL_DIR: '/models/e5' }, 'MEMORY_EMBEDDINGS_MODEL_DIR'],
    [{ MEMORY_EMBEDDINGS_DIMENSIONS: '4' }, 'MEMORY_EMBEDDINGS_DIMENSIONS'],
    [{ MEMORY_DREAM_URL: 'chat.example.com' }, 'MEMORY_DREAM_URL'],
    [{ MEMORY_DREAM_MODEL_SIZE: 'huge' }, 'MEMORY_DREAM_MODEL_SIZE'],
    [{ MEMORY_DREAM_CRON: 'every minute' }, 'MEMORY_DREAM_CRON'],
    [{ MEMORY_DREAM_CRON: '61 * * * *' }, 'MEMORY_DREAM_CRON'],
    [{ MEMORY_CACHE_MB: '0' }, 'MEMORY_CACHE_MB'],
  ]
  for (const [env, variable] of cases) {
    t.throws(() => loadConfig(env), { variable, message: new RegExp(variable) }, variable)
  }
})

t.test('the default dreaming schedule is a valid five-field cron expression', async (t) => {
  t.ok(isCron(DEFAULT_DREAM_CRON), DEFAULT_DREAM_CRON)
  t.equal(DEFAULT_DREAM_CRON.split(' ').length, 5)
  t.equal(loadConfig({}).memoryDreamCron, DEFAULT_DREAM_CRON)
})

t.test('blob store and media: defaults', async (t) => {
  const config = loadConfig({}, '/srv')
  t.equal(config.blobStore, 'local')
  t.equal(config.blobDir, '/srv/.agent-gateway/blobs')
  t.equal(config.s3Bucket, undefined)
  t.equal(config.s3Endpoint, undefined)
  t.equal(config.s3Region, 'us-east-1')
  t.equal(config.s3Prefix, undefined)
  t.equal(config.s3ForcePathStyle, false)
  t.equal(config.s3AccessKeyId, undefined)
  t.equal(config.s3SecretAccessKey, undefined)
  t.equal(config.publicMediaUrl, config.publicBaseUrl, 'audio is hosted under the gateway by default')
  t.equal(config.mediaUrl, undefined, 'media runs in-process')
  t.equal(config.mediaInternalToken, undefined)
  t.equal(config.songUpstreamUrl, undefined, 'the offline composer')
  t.equal(config.songUpstreamApiKey, undefined)
  t.equal(config.songUpstreamModel, undefined)
  t.equal(config.speechUpstreamUrl, undefined, 'espeak-ng')
  t.equal(config.speechUpstreamApiKey, undefined)
  t.equal(config.speechUpstreamModel, undefined)
  t.equal(config.mediaUpstreamTimeoutMs, 120_000)
  t.equal(config.mediaUpstreamRetries, 2)
  t.equal(config.mediaConcurrency, 2)
  t.equal(config.mediaAnalysisThreads, Math.max(1, os.availableParallelism()))
  t.equal(config.soundfontPath, '/usr/share/sounds/sf2/FluidR3_GM.sf2')
  t.equal(loadConfig({ PUBLIC_BASE_URL: 'https://agents.example.com/' }).publicMediaUrl, 'https://agents.example.com', 'follows PUBLIC_BASE_URL')
})

t.test('blob store and media: overrides', async (t) => {
  const config = loadConfig(
    {
      BLOB_STORE: 's3',
      S3_BUCKET: 'agw-media',
      S3_ENDPOINT: 'http://minio.storage.svc:9000',
      S3_REGION: 'auto',
      S3_PREFIX: '/prod/agw/',
      S3_FORCE_PATH_STYLE: 'true',
      S3_ACCESS_KEY_ID: 'AKIAEXAMPLE',
      S3_SECRET_ACCESS_KEY: 'secret/with+chars',
      PUBLIC_MEDIA_URL: 'https://media.example.com/',
      MEDIA_URL: 'http://agw-media.agents.svc:4023/',
      MEDIA_INTERNAL_TOKEN: TOKEN,
      SONG_UPSTREAM_URL: 'https://songs.example.com/v1',
      SONG_UPSTREAM_API_KEY: 'song-key',
      SONG_UPSTREAM_MODEL: 'song-model-2',
      SPEECH_UPSTREAM_URL: 'https://tts.example.com/v1',
      SPEECH_UPSTREAM_API_KEY: 'tts-key',
      SPEECH_UPSTREAM_MODEL: 'tts-1',
      MEDIA_UPSTREAM_TIMEOUT_MS: '30000',
      MEDIA_UPSTREAM_RETRIES: '0',
      MEDIA_CONCURRENCY: '4',
      MEDIA_ANALYSIS_THREADS: '3',
      SOUNDFONT_PATH: 'fonts/gm.sf2',
    },
    '/srv',
  )
  t.equal(config.blobStore, 's3')
  t.equal(config.s3Bucket, 'agw-media')
  t.equal(config.s3Endpoint, 'http://minio.storage.svc:9000')
  t.equal(config.s3Region, 'auto')
  t.equal(config.s3Prefix, 'prod/agw', 'leading and trailing slashes dropped')
  t.equal(config.s3ForcePathStyle, true)
  t.equal(config.s3AccessKeyId, 'AKIAEXAMPLE')
  t.equal(config.s3SecretAccessKey, 'secret/with+chars')
  t.equal(config.publicMediaUrl, 'https://media.example.com')
  t.equal(config.mediaUrl, 'http://agw-media.agents.svc:4023', 'trailing slash dropped')
  t.equal(config.mediaInternalToken, TOKEN)
  t.equal(config.songUpstreamUrl, 'https://songs.example.com/v1')
  t.equal(config.songUpstreamApiKey, 'song-key')
  t.equal(config.songUpstreamModel, 'song-model-2')
  t.equal(config.speechUpstreamUrl, 'https://tts.example.com/v1')
  t.equal(config.speechUpstreamApiKey, 'tts-key')
  t.equal(config.speechUpstreamModel, 'tts-1')
  t.equal(config.mediaUpstreamTimeoutMs, 30_000)
  t.equal(config.mediaUpstreamRetries, 0)
  t.equal(config.mediaConcurrency, 4)
  t.equal(config.mediaAnalysisThreads, 3)
  t.equal(config.soundfontPath, '/srv/fonts/gm.sf2', 'relative to the working directory')
  t.equal(loadConfig({ S3_FORCE_PATH_STYLE: 'false' }).s3ForcePathStyle, false)
  t.equal(loadConfig({ S3_BUCKET: 'kept-for-later' }).blobStore, 'local', 'S3 settings without BLOB_STORE=s3 leave the local store')
})

t.test('the documented table lists every variable', async (t) => {
  const table = configTable()
  for (const variable of configVariables) t.match(table, `\`${variable.name}\``)
})

t.test('ALLOWED_HOSTS: a list of names or *.suffix, * for any; anything else names the variable', async (t) => {
  t.equal(loadConfig({}).allowedHosts, undefined)
  t.same(loadConfig({ ALLOWED_HOSTS: ' gw.example.com, *.svc.cluster.local ,' }).allowedHosts, ['gw.example.com', '*.svc.cluster.local'])
  t.same(loadConfig({ ALLOWED_HOSTS: '*' }).allowedHosts, ['*'])
  for (const bad of ['gw.example.com/path', 'a b', 'http://gw.example.com', '\u0000']) {
    t.throws(() => loadConfig({ ALLOWED_HOSTS: bad }), { name: 'ConfigError', message: /ALLOWED_HOSTS/ }, JSON.stringify(bad))
  }
})
