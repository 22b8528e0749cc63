// node-redis 3 (npm "redis" v3, installed as "redis3") against a node whose
// peers are down (issue 12 item 7; ci/clients.sh ACTIVE_CLIENT_CHECKS=1).
// Its INFO-based ready check retries while INFO shows `loading:1` or a
// `master_link_status` other than `up`, and commands wait in its offline
// queue until then: the node must look ready and accept writes.
// Usage: node peer-down-node-redis3.js PORT (or LATTICE_PORT).
"use strict";
const redis = require("redis3");
const { makeChecker, eq } = require("./lib");

const READY_MS = 20000; // clients.sh kills a program after 30 s
const CMD_MS = 5000;

// The client's callback API as a promise, with a deadline.
function call(client, cmd, ...args) {
  return new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`${cmd} got no reply in ${CMD_MS} ms`)), CMD_MS);
    client.send_command(cmd, args, (err, v) => {
      clearTimeout(t);
      err ? rej(err) : res(v);
    });
  });
}

// Connects and waits for "ready"; on a timeout says what INFO last showed.
function connect(port) {
  const c = redis.createClient({ port, host: "127.0.0.1", retry_strategy: () => undefined });
  const ready = new Promise((res, rej) => {
    const t = setTimeout(() => {
      const i = c.server_info || {};
      rej(new Error(`not ready after ${READY_MS} ms; INFO showed loading:${i.loading} ` +
        `role:${i.role} master_link_status:${i.master_link_status}`));
    }, READY_MS);
    c.once("ready", () => { clearTimeout(t); res(); });
    c.once("error", (e) => { clearTimeout(t); rej(e); });
  });
  return { c, ready };
}

async function main() {
  const port = Number(process.argv[2] || process.env.LATTICE_PORT);
  const tag = `node-redis ${require("redis3/package.json").version} (peer down)`;
  const { check, failed } = makeChecker(tag);
  const { c: r, ready } = connect(port);
  const k = "peerdown:noderedis3:";
  let ok = false;
  await check("connect + ready check (INFO loading, master_link_status)", async () => {
    await ready;
    ok = true;
  });
  if (ok) {
    await check("set/get", async () => {
      eq(await call(r, "set", k + "a", "hello"), "OK");
      eq(await call(r, "get", k + "a"), "hello");
    });
    await check("incr", async () => {
      eq(await call(r, "set", k + "n", "10"), "OK");
      eq(await call(r, "incr", k + "n"), 11);
      eq(await call(r, "get", k + "n"), "11");
    });
    await check("read back on a new connection", async () => {
      const { c: r2, ready: ready2 } = connect(port);
      try {
        await ready2;
        eq(await call(r2, "mget", k + "a", k + "n"), ["hello", "11"]);
      } finally {
        r2.end(true);
      }
    });
  }
  r.end(true);
  console.log(`node-redis 3 (peer down): ${failed.length} failed`);
  process.exit(failed.length ? 1 : 0);
}

main().catch((e) => { console.log("FAIL [node-redis 3 crashed]:", e); process.exit(1); });
