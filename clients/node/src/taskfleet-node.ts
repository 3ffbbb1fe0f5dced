#!/usr/bin/env node
// The `taskfleet-node` bin. Its file name starts with "taskfleet" so that a drain hook
// (`taskfleet-node drain` or Python's `taskfleet drain`) recognises the worker by its
// command line, however it was started (`node .../taskfleet-node.js worker`).
import { rememberStopSignals } from "./worker/early.js";

// A worker's stop signals are noted before the CLI and the worker load: a SIGTERM then
// drains it (exit 0), never kills it.
if (process.argv[2] === "worker") rememberStopSignals();
const { main } = await import("./cli.js");
const code = await main(process.argv.slice(2));
// Exit now: a handler's timers or sockets must not keep a drained worker alive.
process.exit(code);
