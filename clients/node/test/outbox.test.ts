// The outbox's lanes: outcomes that end together go out as one write per lane, back to
// back, each at most its share of the slots; none is written twice or left behind.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { Outcome } from "../src/worker/execution.js";
import { Flag } from "../src/worker/flag.js";
import type { RedisGate } from "../src/worker/gate.js";
import { MAX_BATCH } from "../src/worker/limits.js";
import { OUTBOX_LANES, Outbox, outboxBatch } from "../src/worker/outcomes.js";

const outcome = (i: number): Outcome => ({ result: String(i) }) as unknown as Outcome;
const noGate = undefined as unknown as RedisGate; // no write here fails

describe("the outbox", () => {
  it("takes a share of the slots per lane in a write, within 1..MAX_BATCH", () => {
    assert.equal(OUTBOX_LANES, 2);
    assert.equal(outboxBatch(1), 1);
    assert.equal(outboxBatch(2), 1);
    assert.equal(outboxBatch(8), 4);
    assert.equal(outboxBatch(9), 5);
    assert.equal(outboxBatch(32), 16);
    assert.equal(outboxBatch(1000), MAX_BATCH);
    assert.equal(outboxBatch(8, 1), 8);
  });

  it("writes outcomes that end together in one write per lane at once, each once", async () => {
    const writes: string[][] = [];
    let inFlight = 0;
    let most = 0;
    const release: (() => void)[] = [];
    const all = new Flag();
    const written = new Set<string>();
    const box = new Outbox(
      async (batch) => {
        writes.push(batch.map((o) => o.result ?? ""));
        inFlight += 1;
        most = Math.max(most, inFlight);
        await new Promise<void>((r) => release.push(r));
        inFlight -= 1;
        for (const o of batch.splice(0)) written.add(o.result ?? "");
        if (written.size === 10) all.set();
      },
      noGate,
      new Flag(),
      2,
      4,
    );
    const until = new Flag();
    const serving = box.serve(until);
    for (let i = 0; i < 8; i++) box.add(outcome(i));
    // both lanes take their share and wait for their replies together
    while (release.length < 2) await new Promise((r) => setImmediate(r));
    assert.deepEqual(writes, [
      ["0", "1", "2", "3"],
      ["4", "5", "6", "7"],
    ]);
    box.add(outcome(8));
    box.add(outcome(9));
    while (!all.isSet()) {
      release.shift()?.();
      await new Promise((r) => setImmediate(r));
    }
    assert.equal(most, 2);
    assert.deepEqual([...written].sort(), ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    assert.equal(box.size, 0);
    until.set();
    box.ready.set();
    await serving;
  });
});
