// Copy the protocol's script bundle (the assembled Lua scripts and manifest.json, the
// bytes the Python package sends) into this package's bundle/ folder, replacing what
// was there: the npm package carries the same bytes, never its own Lua.
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const source = fileURLToPath(
  new URL("../../../worker-image/taskfleet/protocol/bundle/", import.meta.url),
);
const target = fileURLToPath(new URL("../bundle/", import.meta.url));

const files = readdirSync(source).filter((f) => f.endsWith(".lua") || f === "manifest.json");
if (!files.includes("manifest.json")) {
  console.error(`copy-bundle: no manifest.json in ${source}`);
  process.exit(2);
}
rmSync(target, { recursive: true, force: true });
mkdirSync(target, { recursive: true });
for (const file of files) copyFileSync(source + file, target + file);
console.log(`copy-bundle: ${files.length} files into bundle/`);
