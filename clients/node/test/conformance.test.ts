// The protocol's conformance vectors (the repository's conformance/ folder), run on a real
// redis-server with this package's bundle and argument packing: one test per case.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import { packagedBundle } from "../src/bundle.js";
import { encodePayload } from "../src/encoding.js";
import { loadCases, runCase } from "./conformance.js";
import { REPOSITORY } from "./python.js";
import { RedisServer } from "./redis.js";

const DIR = process.env.TASKFLEET_CONFORMANCE_DIR ?? `${REPOSITORY}conformance/cases`;
const bundle = packagedBundle();
const cases = existsSync(DIR) ? loadCases(DIR, bundle.manifest.protocol) : [];

describe("conformance vectors", existsSync(DIR) ? {} : { skip: `no vectors in ${DIR}` }, () => {
  const server = new RedisServer();
  let client: Redis;
  before(async () => {
    await server.start();
    client = server.admin();
  });
  after(async () => {
    client.disconnect();
    await server.stop();
  });
  for (const c of cases) it(c.name, () => runCase(client, bundle, c, encodePayload));

  it("fails a case whose expectation was altered", async () => {
    const original = cases.find((c) => c.steps.some((s) => "call" in s));
    assert.ok(original !== undefined);
    const steps = original.steps.map((s) => ("call" in s ? { ...s, expect: ["altered"] } : s));
    await assert.rejects(runCase(client, bundle, { ...original, steps }), /expected \["altered"\]/);
  });
});
