// The one probe of the Redis server's settings (src/protocol/serverprobe.ts): what it reads on a
// real server, with CONFIG allowed or refused, and that the worker's start uses it.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Redis } from "ioredis";

import { evicts, probeServer, settingsOf } from "../src/protocol/serverprobe.js";
import { Flag } from "../src/worker/flag.js";
import type { RedisGate } from "../src/worker/gate.js";
import type { Settings } from "../src/worker/settings.js";
import { RedisEvicts, checkEviction } from "../src/worker/start.js";
import { RedisServer } from "./redis.js";

const SRC = fileURLToPath(new URL("../../src/", import.meta.url));

describe("settingsOf", () => {
  it("takes the policy from CONFIG GET, else from INFO", () => {
    assert.equal(
      settingsOf({ "maxmemory-policy": "allkeys-lru" }, null).evictionPolicy,
      "allkeys-lru",
    );
    const fromInfo = settingsOf(null, "# Memory\r\nmaxmemory_policy:noeviction\r\n");
    assert.equal(fromInfo.evictionPolicy, "noeviction");
    assert.equal(evicts(fromInfo), false);
    assert.deepEqual(settingsOf(null, null), {
      evictionPolicy: null,
      version: null,
      aof: null,
      rdb: null,
    });
  });

  it("reads the version and persistence: AOF from INFO, RDB from the save setting", () => {
    const found = settingsOf({ save: "3600 1" }, "redis_version:7.2.4\r\naof_enabled:1\r\n");
    assert.deepEqual(found, { evictionPolicy: null, version: "7.2.4", aof: true, rdb: true });
    assert.equal(settingsOf({ save: "" }, "aof_enabled:0").rdb, false);
  });
});

describe("probeServer on a real Redis", () => {
  const server = new RedisServer([
    "--maxmemory-policy",
    "allkeys-lru",
    "--appendonly",
    "yes",
    "--save",
    "900 1",
  ]);
  before(() => server.start());
  after(() => server.stop());

  it("reads the policy, the version and persistence", async () => {
    const admin = server.admin();
    try {
      const version = /redis_version:(\S+)/.exec(await admin.info("server"))?.[1];
      const found = await probeServer(admin);
      assert.deepEqual(found, { evictionPolicy: "allkeys-lru", version, aof: true, rdb: true });
      assert.equal(evicts(found), true);
    } finally {
      admin.disconnect();
    }
  });

  it("makes the worker's start refuse an evicting Redis unless eviction is allowed", async () => {
    const admin = server.admin();
    const gated = {
      gate: undefined as unknown as RedisGate,
      drain: new Flag(),
      closing: new Flag(),
    }; // no outage here
    const settings = (allowEviction: boolean): Settings =>
      ({ idleWait: 1, allowEviction }) as unknown as Settings;
    try {
      await assert.rejects(checkEviction(admin, settings(false), gated), RedisEvicts);
      assert.equal(await checkEviction(admin, settings(true), gated), "allkeys-lru");
    } finally {
      admin.disconnect();
    }
  });

  it("reads the policy from INFO when CONFIG is refused, as on managed services", async () => {
    const admin = server.admin();
    await admin.call("ACL", ["SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-config"]);
    const app = new Redis({
      host: "127.0.0.1",
      port: server.port,
      username: "app",
      password: "app-pw",
      lazyConnect: true,
    });
    try {
      const found = await probeServer(app);
      assert.equal(found.evictionPolicy, "allkeys-lru");
      assert.equal(found.rdb, null); // CONFIG GET save refused: not known
      await assert.rejects(probeServer(app, { refused: () => false }), /NOPERM|permission/i);
    } finally {
      app.disconnect();
      admin.disconnect();
    }
  });
});

describe("the probe's callers", () => {
  it("the worker's start reads the server through the probe", () => {
    const start = readFileSync(join(SRC, "worker", "start.ts"), "utf8");
    assert.match(start, /probeServer\(client/);
  });

  it("no module but the probe sends CONFIG or INFO", () => {
    const found: string[] = [];
    const walk = (dir: string): void => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (path.endsWith(".ts") && entry.name !== "serverprobe.ts") {
          if (
            /call\(\s*"(CONFIG|INFO)"|\.config\(\s*"GET"|\.info\(\s*"/.test(
              readFileSync(path, "utf8"),
            )
          )
            found.push(path);
        }
      }
    };
    walk(SRC);
    assert.deepEqual(found, []);
  });
});
