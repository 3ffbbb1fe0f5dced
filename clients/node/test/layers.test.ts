import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { QueueKeys } from "../src/keys.js";
import {
  KEY_NAMES,
  KEY_SUFFIX,
  type KeyName,
  SCRIPT_ARGV,
  SCRIPT_NAMES,
  type ScriptName,
} from "../src/protocol/index.js";
import { PRODUCER, RUNTIME, checkedSources, importsOf, layoutNamed, program } from "./layers.js";

/** What the layout check finds in each text, each read as a module of src/ (one program for all). */
function findIn(...texts: string[]): string[][] {
  const paths = texts.map((_, i) => `src/__layers_snippet_${i}__.ts`);
  const p = program(Object.fromEntries(paths.map((path, i) => [path, texts[i] ?? ""])));
  const files = new Map(checkedSources(p));
  return paths.map((path) => {
    const file = files.get(path);
    assert.ok(file !== undefined);
    return layoutNamed(file, p.getTypeChecker(), "m");
  });
}

describe("the Redis layout stays in src/protocol/", () => {
  const p = program();
  const checker = p.getTypeChecker();
  const sources = checkedSources(p);

  it("reads every module of src/ outside it", () => {
    const paths = sources.map(([path]) => path);
    assert.ok(paths.includes("src/queue.ts") && paths.includes("src/worker/broker.ts"));
    assert.ok(!paths.some((path) => path.startsWith("src/protocol/") || RUNTIME.has(path)));
  });

  it("finds no module outside it that sends a Redis command or names a key or a stored field", () => {
    const found = sources.flatMap(([path, file]) => layoutNamed(file, checker, path));
    assert.deepEqual(found, []);
  });

  it("finds a hand-written read of the lease TTL, each part of it", () => {
    const [found] = findIn(
      [
        'import type { Client } from "./connection.js";',
        'import type { QueueKeys } from "./keys.js";',
        "export async function ttl(client: Client, keys: QueueKeys): Promise<string | null> {",
        '  return client.hget(keys.key("config"), "lease_ttl_s");',
        "}",
      ].join("\n"),
    );
    assert.deepEqual(found, [
      "m:4 sends hget itself",
      "m:4 names the key .key",
      'm:4 names the field "lease_ttl_s"',
    ]);
  });

  it("finds each way of naming the layout", () => {
    const cases: [string, RegExp][] = [
      ['const p = c.pipeline(); p.zcard("x");', /sends pipeline itself/],
      ['await c.call("TIME", []);', /sends call itself/],
      ['const key = "tf:{q}:stats";', /spells a key/],
      ['const key = prefix + "schedules:due";', /spells a key/],
      ['const at = record["run_at"];', /names the field "run_at"/],
      ["const at = record.heartbeat_ms;", /names the field heartbeat_ms/],
      ["const key = layout.config;", /names the key .config/],
      ['const ttl = seen.get("lease_ttl_s");', /names the field "lease_ttl_s"/],
      ['const key = keys.item("task", "1");', /names the key .item/],
    ];
    const head = [
      'import type { Client } from "./connection.js";',
      'import type { QueueKeys } from "./keys.js";',
      'import type { QueueLayout } from "./protocol/layout.js";',
      "declare const c: Client, keys: QueueKeys, layout: QueueLayout, prefix: string;",
      "declare const record: Record<string, string>, seen: Map<string, string>;",
    ].join("\n");
    const results = findIn(
      ...cases.map(
        ([line]) =>
          `${head}\nexport async function f(): Promise<unknown> {\n${line}\nreturn undefined;\n}\n`,
      ),
    );
    for (const [i, [line, expected]] of cases.entries()) {
      const found = results[i] ?? [];
      assert.equal(found.length, line.includes("pipeline") ? 2 : 1, `${line}: ${found.join("; ")}`);
      assert.match(found[0] ?? "", expected);
    }
  });

  it("lets the rest be: the client's lifecycle, a map's own keys, messages naming an argument, a queue's name", () => {
    const [found] = findIn(
      [
        'import type { Client } from "./connection.js";',
        'import type { QueueKeys } from "./keys.js";',
        "declare const c: Client, keys: QueueKeys, seen: Map<string, number>;",
        "declare function checkedInt(value: unknown, name: string): number;",
        "export function f(): string {",
        "  c.disconnect();",
        '  seen.set("x", 1);',
        '  checkedInt(1, "max_attempts");',
        "  return keys.queue;",
        "}",
      ].join("\n"),
    );
    assert.deepEqual(found, []);
  });
});

describe("imports go one way", () => {
  it("the worker imports no producer module", () => {
    const p = program();
    const wrong = checkedSources(p)
      .filter(([path]) => path.startsWith("src/worker/"))
      .flatMap(([path, file]) =>
        importsOf(file)
          .filter((target) => PRODUCER.has(target))
          .map((t) => `${path} imports ${t}`),
      );
    assert.deepEqual(wrong, []);
  });

  it("sees an import of the producer from the worker", () => {
    const p = program({
      "src/worker/__layers_snippet__.ts": 'export { Queue } from "../queue.js";\n',
    });
    const file = checkedSources(p).find(
      ([path]) => path === "src/worker/__layers_snippet__.ts",
    )?.[1];
    assert.ok(file !== undefined);
    assert.deepEqual(importsOf(file), ["src/queue.ts"]);
  });
});

describe("the generated protocol module", () => {
  it("makes a misspelt key, field, script or argument a compile error", () => {
    const path = "src/protocol/__typo_snippet__.ts";
    const p = program({
      [path]: [
        'import type { Bundle } from "../bundle.js";',
        'import { QueueLayout, TASK } from "./layout.js";',
        "declare const bundle: Bundle;",
        'const layout = new QueueLayout("q");',
        "export const a = layout.confg;",
        "export const b = TASK.lease_untill;",
        'export const c = bundle.pack("sweeep", { bound: 1 });',
        'export const d = bundle.pack("sweep", { bund: 1 });',
        'export const e = layout.config + TASK.lease_until + String(bundle.pack("sweep", { bound: 1 }));',
      ].join("\n"),
    });
    const file = p.getSourceFiles().find((f) => f.fileName.endsWith(path));
    assert.ok(file !== undefined);
    const lines = p
      .getSemanticDiagnostics(file)
      .map((d) => file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1);
    assert.deepEqual([...new Set(lines)].sort(), [5, 6, 7, 8]);
  });

  it("declares each script's arguments and record as the packaged manifest does", () => {
    const manifest = packagedBundle().manifest;
    assert.deepEqual([...SCRIPT_NAMES], Object.keys(manifest.scripts));
    for (const [name, decl] of Object.entries(manifest.scripts)) {
      const argv = SCRIPT_ARGV[name as ScriptName];
      assert.deepEqual(
        argv.args,
        decl.args.map((a) => a.name),
        name,
      );
      assert.deepEqual(
        argv.record,
        (decl.repeated?.fields ?? []).map((f) => f.name),
        name,
      );
    }
  });

  it("names every key of the packaged manifest, with its suffix", () => {
    const manifest = packagedBundle().manifest;
    assert.deepEqual(
      [...KEY_NAMES],
      manifest.keys.map((k) => k.name),
    );
    const keys = new QueueKeys("q", packagedBundle());
    for (const k of manifest.keys)
      assert.equal(keys.key(k.name as KeyName), keys.prefix + KEY_SUFFIX[k.name as KeyName]);
  });
});
