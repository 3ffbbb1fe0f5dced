import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { checkManifest, loadBundle, packagedBundle, packagedBundleDir } from "../src/bundle.js";
import { ProtocolError } from "../src/errors.js";
import { QueueKeys } from "../src/keys.js";
import type { KeyName } from "../src/protocol/layout.js";

const REPOSITORY_BUNDLE = fileURLToPath(
  new URL("../../../../worker-image/taskfleet/protocol/bundle/", import.meta.url),
);

function bundleFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".lua") || f === "manifest.json")
    .sort();
}

describe("the packaged script bundle", () => {
  it("holds exactly the repository's bundle files, byte for byte", () => {
    const ours = bundleFiles(packagedBundleDir());
    const theirs = bundleFiles(REPOSITORY_BUNDLE);
    assert.deepEqual(
      ours,
      theirs,
      "bundle/ lists other files than the repository's bundle: run npm run bundle",
    );
    for (const file of theirs) {
      const a = readFileSync(`${packagedBundleDir()}/${file}`);
      const b = readFileSync(`${REPOSITORY_BUNDLE}/${file}`);
      assert.ok(a.equals(b), `bundle/${file} differs from the repository's: run npm run bundle`);
    }
  });

  it("loads every script the manifest declares, each matching its sha1", () => {
    const bundle = packagedBundle();
    const manifest = JSON.parse(readFileSync(`${packagedBundleDir()}/manifest.json`, "utf8")) as {
      scripts: Record<string, { file: string; sha1: string }>;
    };
    for (const [name, decl] of Object.entries(manifest.scripts)) {
      const script = bundle.script(name);
      const sha1 = createHash("sha1")
        .update(readFileSync(`${REPOSITORY_BUNDLE}/${decl.file}`))
        .digest("hex");
      assert.equal(script.sha1, sha1);
      assert.equal(script.sha1, decl.sha1);
    }
  });

  it("refuses a script whose bytes do not match the manifest", () => {
    assert.throws(() => loadBundle("/nonexistent-bundle"), ProtocolError);
    assert.throws(
      () => checkManifest({ protocol: 99, key_prefix: "tf:{%QUEUE%}:", keys: [], scripts: {} }),
      /speaks protocol 1/,
    );
  });
});

describe("arguments packed by name", () => {
  const bundle = packagedBundle();

  it("puts each named argument at its declared position, records last", () => {
    const decl = bundle.script("enqueue").decl;
    const repeated = decl.repeated;
    assert.ok(repeated !== null);
    const named: Record<string, string> = {};
    for (const arg of decl.args)
      if (arg.name !== repeated.count)
        named[arg.name] = arg.type === "int" || arg.type === "number" ? "7" : `<${arg.name}>`;
    const record = (i: number): Record<string, string> =>
      Object.fromEntries(
        repeated.fields.map((f) => [
          f.name,
          f.type === "int" || f.type === "number" ? String(i) : `${f.name}${i}`,
        ]),
      );
    const argv = bundle.packByName("enqueue", named, [record(1), record(2)]);
    decl.args.forEach((arg, i) => {
      assert.equal(argv[i], arg.name === repeated.count ? "2" : named[arg.name]);
    });
    const width = repeated.fields.length;
    assert.equal(argv.length, decl.args.length + 2 * width);
    repeated.fields.forEach((field, j) => {
      assert.equal(argv[decl.args.length + j], record(1)[field.name]);
      assert.equal(argv[decl.args.length + width + j], record(2)[field.name]);
    });
  });

  it("sends an optional argument left out as the empty string", () => {
    const decl = bundle.script("enqueue").decl;
    const argv = bundle.pack("enqueue", {}, []);
    decl.args.forEach((arg, i) => {
      if (arg.optional) assert.equal(argv[i], "");
    });
  });

  it("refuses unknown names, missing required arguments and values of the wrong type", () => {
    assert.throws(
      () => bundle.packByName("enqueue", { no_such_arg: 1 }),
      /has no argument no_such_arg/,
    );
    assert.throws(() => bundle.packByName("sweep", {}), /argument bound is required/);
    assert.throws(() => bundle.packByName("sweep", { bound: 1.5 }), /not of type int/);
    assert.throws(
      () => bundle.packByName("cancel", {}, [{ nope: "x" }]),
      /records have no field nope/,
    );
    assert.throws(() => bundle.packByName("no_such_script", {}), /no script no_such_script/);
  });

  it("names every key of a queue from the manifest, the queue as the hash tag", () => {
    const keys = new QueueKeys("emails", bundle);
    const enqueue = keys.forScript("enqueue");
    assert.deepEqual(
      enqueue,
      bundle.script("enqueue").decl.uses_keys.map((k) => keys.key(k as KeyName)),
    );
    for (const key of enqueue) assert.ok(key.startsWith("tf:{emails}:"), key);
    assert.equal(keys.item("task", "abc"), `${keys.key("task")}abc`);
  });
});
