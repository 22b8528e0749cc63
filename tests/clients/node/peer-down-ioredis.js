// ioredis against a node whose peers are down (issue 12 item 7;
// ci/clients.sh ACTIVE_CLIENT_CHECKS=1): its INFO `loading:` ready check
// must pass and the node must accept writes.
// Usage: node peer-down-ioredis.js PORT (or LATTICE_PORT).
"use strict";
const Redis = require("ioredis");
const { makeChecker, eq } = require("./lib");

const READY_MS = 20000; // clients.sh kills a program after 30 s

function connect(port) {
  const c = new Redis({
    port,
    host: "127.0.0.1",
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
    commandTimeout: 5000,
    // Repeat a ready check that saw `loading:1` within 1 s (default 10 s).
    maxLoadingRetryTime: 1000,
  });
  const ready = new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`not ready after ${READY_MS} ms`)), READY_MS);
    c.once("ready", () => { clearTimeout(t); res(); });
    c.once("error", (e) => { clearTimeout(t); rej(e); });
  });
  return { c, ready };
}

async function main() {
  const port = Number(process.argv[2] || process.env.LATTICE_PORT);
  const tag = `ioredis ${require("ioredis/package.json").version} (peer down)`;
  const { check, failed } = makeChecker(tag);
  const { c: r, ready } = connect(port);
  const k = "peerdown:ioredis:";
  let ok = false;
  await check("connect + ready check (INFO loading)", async () => {
    await ready;
    ok = true;
  });
  if (ok) {
    await check("set/get", async () => {
      eq(await r.set(k + "a", "hello"), "OK");
      eq(await r.get(k + "a"), "hello");
    });
    await check("incr", async () => {
      eq(await r.set(k + "n", "10"), "OK");
      eq(await r.incr(k + "n"), 11);
      eq(await r.get(k + "n"), "11");
    });
    await check("read back on a new connection", async () => {
      const { c: r2, ready: ready2 } = connect(port);
      try {
        await ready2;
        eq(await r2.mget(k + "a", k + "n"), ["hello", "11"]);
      } finally {
        r2.disconnect();
      }
    });
  }
  r.disconnect();
  console.log(`ioredis (peer down): ${failed.length} failed`);
  process.exit(failed.length ? 1 : 0);
}

main().catch((e) => { console.log("FAIL [ioredis crashed]:", e); process.exit(1); });
