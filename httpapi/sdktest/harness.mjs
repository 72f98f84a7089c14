// harness.mjs is what the SDK scripts share: the server they test, their
// checks and their report.
//
// GOVINFER_BASE_URL is the server (http://host:port) and GOVINFER_MODEL its
// model id. Each check runs one async function; finish prints one JSON
// object, {"results": [{sdk, name, ok, ms, detail | error}]}, which
// cmd/govinfer's TestSDKs reads, and exits 1 if a check failed. With
// GOVINFER_RECORD set to a directory, recordingFetch writes the body of
// every request an SDK sends through it there (NNN-sdk-check.json), for the
// Go test that replays them without node (httpapi's TestReplaySDKRequests).
import fs from "node:fs";
import path from "node:path";

export const base = process.env.GOVINFER_BASE_URL;
export const model = process.env.GOVINFER_MODEL;
if (!base || !model) {
  console.error("set GOVINFER_BASE_URL and GOVINFER_MODEL");
  process.exit(2);
}

const results = [];
const recordDir = process.env.GOVINFER_RECORD;
let current = "";
let recorded = 0;

// recordingFetch is the SDKs' fetch: it saves each request body when
// recording.
export async function recordingFetch(url, init) {
  if (recordDir && init?.method === "POST" && typeof init.body === "string") {
    const name = `${String(recorded++).padStart(3, "0")}-${current.replace(/[^a-zA-Z0-9]+/g, "-")}.json`;
    fs.writeFileSync(path.join(recordDir, name), JSON.stringify({ path: new URL(url).pathname, body: JSON.parse(init.body) }, null, 1) + "\n");
  }
  return fetch(url, init);
}

// check runs fn as the check name of sdk and records its outcome: fn's
// return value is the detail shown when it passes.
export async function check(sdk, name, fn) {
  current = `${sdk} ${name}`;
  const t0 = Date.now();
  try {
    const detail = await fn();
    results.push({ sdk, name, ok: true, ms: Date.now() - t0, detail: detail ?? "" });
  } catch (e) {
    results.push({ sdk, name, ok: false, ms: Date.now() - t0, error: String(e?.stack ?? e).slice(0, 600) });
  }
}

// assert throws msg unless cond holds.
export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// finish prints the report and exits.
export function finish() {
  console.log(JSON.stringify({ results }));
  process.exit(results.every((r) => r.ok) ? 0 : 1);
}
