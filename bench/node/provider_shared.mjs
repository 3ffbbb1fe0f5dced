// The Node handler of bench/provider_shared.py: one call to the fake provider, then the
// real use settled against the provider quota (mode "quota") or reported as the task's
// cost (mode "per-queue"); a 429 pauses the quota, or this queue's claims.
const { RateLimited } = await import(process.env.TASKFLEET_NODE_ENTRY);

const QUOTA = "provider";

export async function call(payload, task) {
  const body = { queue: task.queue, input_tokens: payload.input_tokens };
  const reply = await fetch(payload.url, { method: "POST", body: JSON.stringify(body) });
  await reply.arrayBuffer();
  if (reply.status === 429) {
    // Retry-After is in seconds; RateLimited takes milliseconds, as every Node duration
    const after = Number(reply.headers.get("retry-after") ?? "1") * 1000;
    if (payload.mode === "per-queue") throw new RateLimited(after, "429 from the provider");
    throw new RateLimited(after, "429 from the provider", { quota: QUOTA });
  }
  if (!reply.ok) throw new Error(`provider answered ${reply.status}`);
  if (payload.mode === "per-queue") task.reportCost(payload.input_tokens);
  else await task.settle(QUOTA, { input_tokens: payload.input_tokens });
  return "ok";
}
