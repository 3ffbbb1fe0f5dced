/**
 * The Node client's layers, read from the source with the TypeScript compiler: the Redis
 * layout (raw commands, key names, stored field names) stays in `src/protocol/`, and the
 * worker does not import the producer. The Python package keeps the same rules
 * (tests/test_layers.py).
 */

import { dirname, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import ts from "typescript";

import {
  BUCKET_FIELDS,
  CONFIG_FIELDS,
  COUNTER_FIELDS,
  KEY_PREFIX,
  KEY_SUFFIX,
  SCHEDULE_FIELDS,
  TASK_FIELDS,
  WORKER_FIELDS,
} from "../src/protocol/layout.js";

/** The package's root (this file runs from dist/test/). */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/**
 * Modules outside src/protocol/ that may still speak to Redis themselves: the bundle and
 * the key list it is read into, and the script runner (the connection's EVALSHA, WAIT,
 * TIME), which `src/protocol/` builds on.
 */
export const RUNTIME = new Set(["src/bundle.ts", "src/keys.ts", "src/connection.ts"]);

/** The client's lifecycle, not commands on a queue's keys (opening, closing, events, a cluster's nodes). */
const LIFECYCLE = new Set([
  "connect",
  "disconnect",
  "quit",
  "duplicate",
  "on",
  "once",
  "off",
  "removeAllListeners",
  "nodes",
]);

/** Key builders' members that name no key: the queue's name and a script's KEYS. */
const KEY_LISTS = new Set(["queue", "forScript"]);

/** The producer's modules: the worker imports none of them. */
export const PRODUCER = new Set([
  "src/queue.ts",
  "src/control.ts",
  "src/groups.ts",
  "src/quotas.ts",
  "src/flowcontrol.ts",
  "src/waiting.ts",
  "src/index.ts",
]);

/** Stored field names only the layout uses: the records' compound names (`lease_ttl_s`, `heartbeat_ms`...). */
const LAYOUT_FIELDS = new Set(
  [
    ...TASK_FIELDS,
    ...WORKER_FIELDS,
    ...SCHEDULE_FIELDS,
    ...BUCKET_FIELDS,
    ...CONFIG_FIELDS,
    ...COUNTER_FIELDS,
  ].filter((name: string) => name.includes("_")),
);
/** Key parts spelt with a colon (`task:`, `schedules:due`...): never a word elsewhere. */
const KEY_PARTS = new Set(Object.values(KEY_SUFFIX).filter((s) => s.includes(":")));
const PREFIX_HEAD = KEY_PREFIX.slice(0, KEY_PREFIX.indexOf("{"));

function inModules(declaration: ts.Declaration, ...packages: string[]): boolean {
  const file = declaration.getSourceFile().fileName;
  return packages.some((p) => file.includes(`/node_modules/${p}/`));
}

function declaredIn(symbol: ts.Symbol | undefined, test: (d: ts.Declaration) => boolean): boolean {
  return (symbol?.declarations ?? []).some(test);
}

function isKeyBuilder(declaration: ts.Declaration): boolean {
  const file = declaration.getSourceFile().fileName;
  const owner = declaration.parent;
  const cls = ts.isClassDeclaration(owner) ? owner.name?.text : undefined;
  return (
    (file.endsWith("/src/keys.ts") && cls === "QueueKeys") ||
    (file.endsWith("/src/protocol/layout.ts") && cls === "QueueLayout")
  );
}

/** Where one source file names a key or a stored field, or sends a Redis command; one line each. */
export function layoutNamed(file: ts.SourceFile, checker: ts.TypeChecker, name: string): string[] {
  const found: string[] = [];
  // a label, not a read: a message's field name given to a call that reads nothing by it
  const labels = new Set<ts.Node>();
  const at = (node: ts.Node): string =>
    `${name}:${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}`;
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
      const method = node.expression.name.text;
      const symbol = checker.getSymbolAtLocation(node.expression.name);
      const command = declaredIn(symbol, (d) => inModules(d, "ioredis", "@ioredis"));
      if (command && !LIFECYCLE.has(method)) found.push(`${at(node)} sends ${method} itself`);
      if (!command && method !== "get") for (const arg of node.arguments) labels.add(arg);
    } else if (ts.isCallExpression(node)) {
      for (const arg of node.arguments) labels.add(arg);
    }
    if (ts.isPropertyAccessExpression(node) && !KEY_LISTS.has(node.name.text)) {
      if (declaredIn(checker.getSymbolAtLocation(node.name), isKeyBuilder)) {
        found.push(`${at(node)} names the key .${node.name.text}`);
      } else if (
        (LAYOUT_FIELDS as Set<string>).has(node.name.text) &&
        checker.getSymbolAtLocation(node.name) === undefined
      ) {
        // a stored hash read as a plain record: `raw.lease_until`
        found.push(`${at(node)} names the field ${node.name.text}`);
      }
    }
    if (
      ts.isStringLiteralLike(node) ||
      ts.isTemplateHead(node) ||
      ts.isTemplateMiddle(node) ||
      ts.isTemplateTail(node)
    ) {
      const text = node.text;
      const inImport = ts.isImportDeclaration(node.parent) || ts.isExportDeclaration(node.parent);
      if (
        !inImport &&
        (text.startsWith(PREFIX_HEAD + "{") || text.includes("}:") || KEY_PARTS.has(text))
      ) {
        found.push(`${at(node)} spells a key: ${JSON.stringify(text.slice(0, 40))}`);
      } else if ((LAYOUT_FIELDS as Set<string>).has(text) && !labels.has(node)) {
        found.push(`${at(node)} names the field ${JSON.stringify(text)}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** The package's own modules an import of `file` names (relative imports only), as package paths. */
export function importsOf(file: ts.SourceFile): string[] {
  const out: string[] = [];
  const add = (spec: ts.Expression | undefined): void => {
    if (spec !== undefined && ts.isStringLiteral(spec) && spec.text.startsWith(".")) {
      const target = resolve(dirname(file.fileName), spec.text).replace(/\.js$/, ".ts");
      out.push(relative(ROOT, target));
    }
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) add(node.moduleSpecifier);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword)
      add(node.arguments[0]);
    ts.forEachChild(node, visit);
  };
  visit(file);
  return out;
}

/** A program of the package's sources, with `extra` files (path relative to the root -> text) added. */
export function program(extra: Readonly<Record<string, string>> = {}): ts.Program {
  const config = ts.getParsedCommandLineOfConfigFile(
    resolve(ROOT, "tsconfig.json"),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
      },
    },
  );
  if (config === undefined) throw new Error("tsconfig.json: unreadable");
  const virtual = new Map(Object.entries(extra).map(([path, text]) => [resolve(ROOT, path), text]));
  const host = ts.createCompilerHost(config.options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (path, language, ...rest) => {
    const text = virtual.get(resolve(path));
    return text === undefined
      ? getSourceFile(path, language, ...rest)
      : ts.createSourceFile(path, text, language, true);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (path) => virtual.has(resolve(path)) || fileExists(path);
  const sources = config.fileNames.filter((f) => relative(ROOT, f).startsWith("src/"));
  return ts.createProgram([...sources, ...virtual.keys()], config.options, host);
}

/** The package's source files outside src/protocol/ and the runtime modules, by package path. */
export function checkedSources(p: ts.Program): [string, ts.SourceFile][] {
  return p
    .getSourceFiles()
    .map((f): [string, ts.SourceFile] => [relative(ROOT, f.fileName), f])
    .filter(
      ([path]) =>
        path.startsWith("src/") && !path.startsWith("src/protocol/") && !RUNTIME.has(path),
    );
}
