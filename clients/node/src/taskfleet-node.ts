#!/usr/bin/env node
// The `taskfleet-node` bin. Its file name starts with "taskfleet" so that a drain hook
// (`taskfleet-node drain` or Python's `taskfleet drain`) recognises the worker by its
// command line, however it was started (`node .../taskfleet-node.js worker`).
import { main } from "./cli.js";

const code = await main(process.argv.slice(2));
// Exit now: a handler's timers or sockets must not keep a drained worker alive.
process.exit(code);
