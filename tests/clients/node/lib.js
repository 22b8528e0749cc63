// Shared assertion helpers for the Node client checks.
"use strict";
const assert = require("node:assert");

function eq(got, want) {
  assert.deepStrictEqual(got, want);
}

function makeChecker(tag) {
  const failed = [];
  // CLIENT_SKIP: comma-separated substrings of check names not to run
  // (ci/clients.sh lists features not built yet, with the reason).
  const skip = (process.env.CLIENT_SKIP || "").toLowerCase().split(",").map((x) => x.trim()).filter(Boolean);
  async function check(name, fn) {
    if (skip.some((x) => `${tag} ${name}`.toLowerCase().includes(x))) {
      console.log(`SKIP [${tag} ${name}]`);
      return;
    }
    try {
      await fn();
    } catch (e) {
      failed.push(name);
      const msg = e && e.message ? e.message.replace(/\n+/g, " ") : String(e);
      console.log(`FAIL [${tag} ${name}]: ${e && e.name}: ${msg}`);
    }
  }
  return { check, failed };
}

// CLIENT SETINFO (lib-name/lib-ver) exists since Redis 7.2; older servers
// reject it and clients ignore that, so only assert it on 7.2+.
function hasSetinfo(infoText) {
  const m = /redis_version:(\d+)\.(\d+)/.exec(infoText);
  return m && (Number(m[1]) > 7 || (Number(m[1]) === 7 && Number(m[2]) >= 2));
}

function libName(clientInfo) {
  const m = / lib-name=(\S*)/.exec(clientInfo);
  return m ? m[1] : null;
}

module.exports = { eq, makeChecker, hasSetinfo, libName };
