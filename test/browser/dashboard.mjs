// dashboard.mjs drives the dlm dashboard in Debian's chromium (headless),
// for cmd/dlm's TestDashboardInBrowser.
//
//   node dashboard.mjs URL SCREENSHOT.png --resource NAME --holder LABEL \
//       --waiters LABEL,LABEL --other NAME --prefix PREFIX [--metadata TEXT] [--token TOKEN]
//
// With --token, the server wants credentials: the script expects the
// page's sign-in form first, signs in with TOKEN, and checks that the page
// then shows the identity and follows the feed.
//
// It opens URL and checks, as a person would read it, that resource NAME is
// held by the session labelled --holder with the sessions --waiters queued
// in that order, and that the holder's metadata reads TEXT, literally (any
// markup in it shown as text). It then prints the line "waiting-for-release" and waits for
// the page to show the first waiter holding and the others queued (the
// caller releases the holder when it reads that line). Then it types PREFIX
// into the filter and checks that NAME stays and the --other resource goes,
// clears the filter, and saves a full-page screenshot to SCREENSHOT.png
// (also on failure, when it can). It prints progress lines "dashboard: ..."
// and exits 0 on success, 1 on failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    resource: { type: 'string' },
    holder: { type: 'string' },
    waiters: { type: 'string' },
    other: { type: 'string' },
    prefix: { type: 'string' },
    metadata: { type: 'string' },
    token: { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
    timeout: { type: 'string', default: '20000' },
  },
});
const [url, screenshot] = positionals;
if (!url || !screenshot || !opt.resource || !opt.holder || !opt.waiters || !opt.other || !opt.prefix) {
  console.error('usage: node dashboard.mjs URL SCREENSHOT.png --resource NAME --holder LABEL ' +
    '--waiters LABEL,LABEL --other NAME --prefix PREFIX');
  process.exit(2);
}
const waiters = opt.waiters.split(',');
const timeout = Number(opt.timeout);

const log = (msg) => console.log(`dashboard: ${msg}`);

// readCard runs in the page: it returns the card of resource name, with its
// holders' and waiters' session labels in order, as the page shows them, or
// null.
function readCard(name) {
  const card = [...document.querySelectorAll('article.resource')].find((a) => a.dataset.resource === name);
  if (!card) return null;
  const labels = (cls) => [...card.querySelectorAll(`tr.${cls}`)].map((tr) => tr.dataset.label);
  const texts = (cls) => [...card.querySelectorAll(`tr.${cls}`)].map((tr) => tr.innerText);
  return { holders: labels('holder'), waiting: labels('waiting'), holderTexts: texts('holder'), waitingTexts: texts('waiting') };
}

// cardShows runs in the page, polled by waitForFunction: whether the card
// of name shows holders and waiting, in order. It is self-contained: the
// page's Content-Security-Policy forbids the eval that calling readCard
// from here would take.
function cardShows([name, holders, waiting]) {
  const card = [...document.querySelectorAll('article.resource')].find((a) => a.dataset.resource === name);
  if (!card) return false;
  const labels = (cls) => JSON.stringify([...card.querySelectorAll(`tr.${cls}`)].map((tr) => tr.dataset.label));
  return labels('holder') === JSON.stringify(holders) && labels('waiting') === JSON.stringify(waiting);
}

// waitCard waits until the card of name shows holders and waiting.
async function waitCard(page, name, holders, waiting, what) {
  log(`waiting for ${what}`);
  try {
    await page.waitForFunction(cardShows, [name, holders, waiting], { timeout });
  } catch (err) {
    const seen = await page.evaluate(readCard, name).catch(() => 'unreadable');
    const conn = await page.locator('#conn').innerText().catch(() => '?');
    throw new Error(`${what}: not shown (${err.message.split('\n')[0]}); feed ${JSON.stringify(conn)}; ` +
      `the page shows ${JSON.stringify(seen)}`);
  }
  const card = await page.evaluate(readCard, name);
  log(`${what}: ${JSON.stringify(card)}`);
  return card;
}

function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}

const userDataDir = mkdtempSync(join(tmpdir(), 'dlm-chromium-'));
let context;
let page;
const problems = [];
const guard = setTimeout(() => {
  console.error('dashboard: FAIL: overall timeout');
  process.exit(1);
}, 10 * timeout);
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: opt.chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
  });
  page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    // Before the sign-in, the server's 401 answers are expected.
    if (msg.type() === 'error' && !(opt.token && / 401 /.test(msg.text()))) problems.push(`console error: ${msg.text()}`);
  });

  log(`opening ${url}`);
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout });
  if (opt.token) {
    await page.locator('#login-section').waitFor({ state: 'visible', timeout });
    log('sign-in form shown');
    await page.locator('#token').fill('not-the-token-0123456789');
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#login-error').waitFor({ state: 'visible', timeout });
    log('a wrong token refused');
    await page.locator('#token').fill(opt.token);
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#login-section').waitFor({ state: 'hidden', timeout });
    const who = await page.locator('#identity').innerText();
    expect(who.length > 0, 'no identity shown after the sign-in');
    expect(await page.locator('#token').inputValue() === '', 'the token stayed in the form');
    log(`signed in as ${who}`);
  }
  await page.locator('#conn[data-state="live"]').waitFor({ timeout });
  log('feed live');
  const version = (await page.locator('#version').textContent()).trim();
  expect(version !== '' && version !== '–', `the header shows no server version: ${JSON.stringify(version)}`);

  // The initial state: one holder, the others queued in order.
  const first = await waitCard(page, opt.resource, [opt.holder], waiters, 'the initial holder and queue');
  expect(/holder/.test(first.holderTexts[0]) && /\bEX\b/.test(first.holderTexts[0]) && /token \d+/.test(first.holderTexts[0]) &&
    /held /.test(first.holderTexts[0]), `holder row lacks role, mode, token or time: ${first.holderTexts[0]}`);
  first.waitingTexts.forEach((t, i) => expect(t.includes(`waiting #${i + 1}`), `waiter row ${i + 1}: ${t}`));
  if (opt.metadata !== undefined) {
    expect(first.holderTexts[0].includes(opt.metadata), `holder row does not read the metadata ${JSON.stringify(opt.metadata)} literally`);
    const injected = await page.locator('#resources td.meta *').count();
    expect(injected === 0, `${injected} elements made from metadata: it was taken as markup`);
  }

  // The cluster and the sessions.
  const leaderRows = await page.locator('#members tr.member.leader').count();
  expect(leaderRows === 1, `${leaderRows} leader rows in the members table, want 1`);
  for (const label of [opt.holder, ...waiters]) {
    const row = page.locator('#sessions tr.session-row').filter({ has: page.locator('td.label', { hasText: label }) });
    expect(await row.count() === 1, `no session row labelled ${label}`);
    const left = await row.locator('td.ttl-left').innerText();
    expect(/\d/.test(left), `session ${label}: TTL left ${JSON.stringify(left)}`);
  }

  // The change: the caller releases the holder.
  console.log('waiting-for-release');
  await waitCard(page, opt.resource, [waiters[0]], waiters.slice(1), 'the first waiter holding');

  // The filter, applied by the server.
  expect(await page.locator('article.resource').filter({ has: page.locator('.name', { hasText: opt.other }) }).count() === 1,
    `resource ${opt.other} not shown before filtering`);
  await page.locator('#prefix').fill(opt.prefix);
  await page.waitForFunction(([prefix, other, resource]) => {
    const names = [...document.querySelectorAll('article.resource')].map((a) => a.dataset.resource);
    return document.body.dataset.prefix === prefix && !names.includes(other) && names.includes(resource) &&
      names.every((n) => n.startsWith(prefix));
  }, [opt.prefix, opt.other, opt.resource], { timeout });
  expect(new URL(page.url()).searchParams.get('prefix') === opt.prefix, `page URL ${page.url()} lacks ?prefix=`);
  log(`filter ${JSON.stringify(opt.prefix)}: ${opt.other} hidden, ${opt.resource} shown`);

  await page.locator('#prefix').fill('');
  await page.waitForFunction((other) => document.body.dataset.prefix === '' &&
    [...document.querySelectorAll('article.resource')].some((a) => a.dataset.resource === other), opt.other, { timeout });
  log('filter cleared');

  if (opt.token) expect(!(await page.content()).includes(opt.token), 'the page holds the token');
  await page.screenshot({ path: screenshot, fullPage: true });
  log(`screenshot ${screenshot}`);
  expect(problems.length === 0, `the page reported problems:\n${problems.join('\n')}`);
  console.log('dashboard: OK');
  process.exitCode = 0;
} catch (err) {
  console.error(`dashboard: FAIL: ${err.message}`);
  if (problems.length) console.error(problems.join('\n'));
  if (page) await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
  clearTimeout(guard);
}
