// Shared assertion helpers for the Node client checks.
"use strict";
const assert = require("node:assert");

function eq(got, want) {
  assert.deepStrictEqual(got, want);
}

function makeChecker(tag) {
  const failed = [];
  async function check(name, fn) {
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

module.exports = { eq, makeChecker };
