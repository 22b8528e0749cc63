// ioredis against LatticeDB: default connect path (INFO-based ready check),
// basic commands, pipelines, error mapping, SELECT. Usage: node ioredis.js PORT
// (or LATTICE_PORT). Prints each failed check; exits 0 only if all held.
"use strict";
const Redis = require("ioredis");
const { makeChecker, eq, hasSetinfo, libName } = require("./lib");

async function main() {
  const port = Number(process.argv[2] || process.env.LATTICE_PORT);
  const tag = `ioredis ${require("ioredis/package.json").version}`;
  const { check, failed } = makeChecker(tag);
  const opts = { port, maxRetriesPerRequest: 1, retryStrategy: () => null };
  const r = new Redis(opts);
  const k = "ioredis:";
  let ready = false;
  await check("connect + ready check (INFO loading)", async () => {
    await new Promise((res, rej) => {
      r.once("ready", res);
      r.once("error", rej);
    });
    ready = true;
  });
  if (!ready) return finish(failed, r);

  await check("CLIENT SETINFO lib-name recorded", async () => {
    if (hasSetinfo(await r.info("server"))) eq(libName(await r.client("INFO")), "ioredis");
  });
  await check("ping", async () => eq(await r.ping(), "PONG"));
  await check("set/get", async () => {
    eq(await r.set(k + "a", "hello"), "OK");
    eq(await r.get(k + "a"), "hello");
    eq(await r.get(k + "missing"), null);
  });
  await check("mset/mget", async () => {
    eq(await r.mset(k + "m1", "1", k + "m2", "2"), "OK");
    eq(await r.mget(k + "m1", k + "nope", k + "m2"), ["1", null, "2"]);
  });
  await check("incr", async () => {
    await r.set(k + "n", "10");
    eq(await r.incr(k + "n"), 11);
  });
  await check("expire/ttl", async () => {
    await r.set(k + "e", "v");
    eq(await r.expire(k + "e", 100), 1);
    const t = await r.ttl(k + "e");
    if (!(t > 0 && t <= 100)) throw new Error(`ttl ${t}`);
  });
  await check("set EX", async () => eq(await r.set(k + "ex", "v", "EX", 100), "OK"));
  await check("del", async () => {
    await r.set(k + "d1", "x");
    await r.set(k + "d2", "y");
    eq(await r.del(k + "d1", k + "d2", k + "missing"), 2);
  });
  await check("pipeline(100)", async () => {
    const p = r.pipeline();
    for (let i = 0; i < 50; i++) p.set(`${k}p${i}`, String(i)).get(`${k}p${i}`);
    const res = await p.exec();
    eq(res.length, 100);
    res.forEach(([err], i) => { if (err) throw new Error(`cmd ${i}: ${err}`); });
    eq(res.filter((_, i) => i % 2 === 1).map((x) => x[1]), [...Array(50).keys()].map(String));
  });
  await check("multi/exec", async () => {
    const res = await r.multi().set(k + "t", "1").incr(k + "t").exec();
    eq(res, [[null, "OK"], [null, 2]]);
  });
  await check("error reply", async () => {
    await r.set(k + "s", "abc");
    let err = null;
    try { await r.incr(k + "s"); } catch (e) { err = e; }
    if (!err) throw new Error("no error raised");
    eq(err.name, "ReplyError");
    eq(err.message, "ERR value is not an integer or out of range");
  });
  await check("select db 1", async () => {
    const r1 = new Redis({ ...opts, db: 1 });
    await r1.set(k + "db", "one");
    eq(await r1.get(k + "db"), "one");
    eq(await r.get(k + "db"), null);
    r1.disconnect();
  });
  await check("10 connections x 500 concurrent INCRs", async () => {
    await r.set(k + "cc", "0");
    const conns = [...Array(10)].map(() => new Redis(opts));
    await Promise.all(conns.map(async (c) => {
      const p = c.pipeline();
      for (let i = 0; i < 500; i++) p.incr(k + "cc");
      await p.exec();
    }));
    conns.forEach((c) => c.disconnect());
    eq(await r.get(k + "cc"), "5000");
  });
  await check("client setname (connectionName)", async () => {
    const r2 = new Redis({ ...opts, connectionName: "ioc" });
    eq(await r2.client("GETNAME"), "ioc");
    r2.disconnect();
  });
  finish(failed, r);
}

function finish(failed, r) {
  r.disconnect();
  console.log(`ioredis: ${failed.length} failed`);
  process.exit(failed.length ? 1 : 0);
}

main().catch((e) => { console.log("FAIL [ioredis crashed]:", e); process.exit(1); });
