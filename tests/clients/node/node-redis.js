// node-redis (npm "redis" v4) against LatticeDB: default connect path,
// basic commands, pipelines, error mapping, SELECT. Usage: node node-redis.js
// PORT (or LATTICE_PORT). Prints each failed check; exits 0 only if all held.
"use strict";
const { createClient } = require("redis");
const { makeChecker, eq, hasSetinfo, libName } = require("./lib");

async function main() {
  const port = Number(process.argv[2] || process.env.LATTICE_PORT);
  const tag = `node-redis ${require("redis/package.json").version}`;
  const { check, failed } = makeChecker(tag);
  const sock = { port, host: "127.0.0.1", reconnectStrategy: false };
  const r = createClient({ socket: sock, name: "nodec" });
  r.on("error", () => {});
  const k = "noderedis:";
  let ok = false;
  await check("connect", async () => { await r.connect(); ok = true; });
  if (!ok) return finish(failed);

  await check("CLIENT SETINFO lib-name recorded", async () => {
    if (hasSetinfo(await r.info("server"))) eq(libName(await r.sendCommand(["CLIENT", "INFO"])), "node-redis");
  });
  await check("ping", async () => eq(await r.ping(), "PONG"));
  await check("client name from connect", async () => eq(await r.clientGetName(), "nodec"));
  await check("info", async () => {
    if (!(await r.info()).includes("redis_version:")) throw new Error("no redis_version");
  });
  await check("set/get", async () => {
    eq(await r.set(k + "a", "hello"), "OK");
    eq(await r.get(k + "a"), "hello");
    eq(await r.get(k + "missing"), null);
  });
  await check("mset/mget", async () => {
    eq(await r.mSet({ [k + "m1"]: "1", [k + "m2"]: "2" }), "OK");
    eq(await r.mGet([k + "m1", k + "nope", k + "m2"]), ["1", null, "2"]);
  });
  await check("incr", async () => {
    await r.set(k + "n", "10");
    eq(await r.incr(k + "n"), 11);
  });
  await check("expire/ttl", async () => {
    await r.set(k + "e", "v");
    eq(await r.expire(k + "e", 100), true);
    const t = await r.ttl(k + "e");
    if (!(t > 0 && t <= 100)) throw new Error(`ttl ${t}`);
  });
  await check("set EX", async () => eq(await r.set(k + "ex", "v", { EX: 100 }), "OK"));
  await check("del", async () => {
    await r.set(k + "d1", "x");
    await r.set(k + "d2", "y");
    eq(await r.del([k + "d1", k + "d2", k + "missing"]), 2);
  });
  await check("pipeline(100, execAsPipeline)", async () => {
    const m = r.multi();
    for (let i = 0; i < 50; i++) m.set(`${k}p${i}`, String(i)).get(`${k}p${i}`);
    const res = await m.execAsPipeline();
    eq(res.length, 100);
    eq(res.filter((_, i) => i % 2 === 1), [...Array(50).keys()].map(String));
  });
  await check("pipeline(100, auto-pipelined Promise.all)", async () => {
    await r.set(k + "auto", "0");
    const ps = [];
    for (let i = 0; i < 100; i++) ps.push(r.incr(k + "auto"));
    eq((await Promise.all(ps))[99], 100);
  });
  await check("multi/exec", async () => {
    eq(await r.multi().set(k + "t", "1").incr(k + "t").exec(), ["OK", 2]);
  });
  await check("error reply", async () => {
    await r.set(k + "s", "abc");
    let err = null;
    try { await r.incr(k + "s"); } catch (e) { err = e; }
    if (!err) throw new Error("no error raised");
    eq(err.constructor.name, "ErrorReply");
    eq(err.message, "ERR value is not an integer or out of range");
  });
  await check("select db 1", async () => {
    const r1 = createClient({ socket: sock, database: 1 });
    r1.on("error", () => {});
    await r1.connect();
    await r1.set(k + "db", "one");
    eq(await r1.get(k + "db"), "one");
    eq(await r.get(k + "db"), null);
    await r1.select(2);
    eq(await r1.get(k + "db"), null);
    await r1.quit();
  });
  await check("quit", async () => eq(await r.quit(), "OK"));
  finish(failed);
}

function finish(failed) {
  console.log(`node-redis: ${failed.length} failed`);
  process.exit(failed.length ? 1 : 0);
}

main().catch((e) => { console.log("FAIL [node-redis crashed]:", e); process.exit(1); });
