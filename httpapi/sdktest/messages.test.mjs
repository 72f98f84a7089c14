// messages.test.mjs drives `govinfer serve`'s Anthropic Messages API
// through the official Anthropic SDK (@anthropic-ai/sdk) as an application
// would: messages.create, messages.stream (its events and finalMessage),
// a forced tool call with its tool_result round trip (is_error too),
// extended thinking with its signed thinking block sent back, countTokens,
// an aborted stream that frees the server's sequence, and the SDK's error
// classes.
//
// GOVINFER_BASE_URL is the server (http://host:port, without /v1) and
// GOVINFER_MODEL its model id. The server runs a random checkpoint, so the
// checks are about the API, never about the text. It prints one JSON
// object, {"results": [...]}, in sdk.test.mjs's format (sdk "anthropic"),
// and exits 1 if a check failed.
//
// With GOVINFER_RECORD set to a directory, it also writes the body of every
// request the SDK sends there (NNN-anthropic-check.json), as sdk.test.mjs
// does.
import Anthropic from "@anthropic-ai/sdk";
import { assert, base, check, finish, model, recordingFetch } from "./harness.mjs";


const client = new Anthropic({ baseURL: base, apiKey: "test", maxRetries: 0, fetch: recordingFetch });
const noThinking = { type: "disabled" };
const user = (text) => ({ role: "user", content: text });

// checkMessage checks the shape every Message has.
function checkMessage(m) {
  assert(typeof m.id === "string" && m.id.startsWith("msg_"), `id ${m.id}`);
  assert(m.type === "message" && m.role === "assistant" && m.model === model, `message ${JSON.stringify(m).slice(0, 300)}`);
  assert(Array.isArray(m.content), `content ${JSON.stringify(m.content)}`);
  assert(["end_turn", "max_tokens", "stop_sequence", "tool_use"].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  const u = m.usage;
  assert(u && u.input_tokens + u.cache_read_input_tokens > 0 && u.output_tokens > 0, `usage ${JSON.stringify(u)}`);
}

const weatherTool = {
  name: "get_weather",
  description: "Get the weather of a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer", minimum: 1, maximum: 7 } },
    required: ["city", "days"],
  },
};

// checkWeatherCall checks a tool_use block of weatherTool against its schema.
function checkWeatherCall(b) {
  assert(b?.type === "tool_use" && b.name === "get_weather", `block ${JSON.stringify(b)}`);
  assert(typeof b.id === "string" && b.id.startsWith("toolu_"), `id ${b.id}`);
  assert(typeof b.input === "object" && typeof b.input.city === "string" && Number.isInteger(b.input.days), `input ${JSON.stringify(b.input)}`);
}

await check("anthropic", "messages.create", async () => {
  const m = await client.messages.create({
    model, max_tokens: 8, thinking: noThinking, temperature: 0,
    system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }],
    messages: [user("Hello")], metadata: { user_id: "u1" },
  });
  checkMessage(m);
  assert(m.content.length === 1 && m.content[0].type === "text" && typeof m.content[0].text === "string", `content ${JSON.stringify(m.content)}`);
  assert(m.stop_reason === "max_tokens" && m.usage.output_tokens === 8, `stop ${m.stop_reason} ${JSON.stringify(m.usage)}`);
});

await check("anthropic", "messages.stream", async () => {
  const stream = client.messages.stream({ model, max_tokens: 12, thinking: noThinking, temperature: 0, messages: [user("Hello")] });
  const types = [];
  let text = "";
  stream.on("streamEvent", (e) => types.push(e.type));
  stream.on("text", (t) => (text += t));
  const m = await stream.finalMessage();
  checkMessage(m);
  assert(types[0] === "message_start" && types.at(-1) === "message_stop", `events ${types}`);
  for (const t of ["content_block_start", "content_block_delta", "content_block_stop", "message_delta"]) {
    assert(types.includes(t), `no ${t} in ${types}`);
  }
  assert(m.content[0]?.type === "text" && m.content[0].text === text, `text ${JSON.stringify(m.content)} vs ${JSON.stringify(text)}`);
  assert(m.usage.output_tokens === 12, `usage ${JSON.stringify(m.usage)}`);
  return `${types.length} events`;
});

await check("anthropic", "stop_sequences", async () => {
  const body = { model, max_tokens: 16, thinking: noThinking, temperature: 0, messages: [user("Count")] };
  const full = (await client.messages.create(body)).content[0]?.text ?? "";
  const chars = [...full];
  assert(chars.length >= 6, `text too short: ${JSON.stringify(full)}`);
  const stop = chars.slice(3, 5).join("");
  const m = await client.messages.create({ ...body, stop_sequences: [stop] });
  assert(m.stop_reason === "stop_sequence" && m.stop_sequence === stop, `stop ${m.stop_reason} ${JSON.stringify(m.stop_sequence)}, want ${JSON.stringify(stop)}`);
  const want = full.slice(0, full.indexOf(stop));
  assert((m.content[0]?.text ?? "") === want, `text ${JSON.stringify(m.content)}, want ${JSON.stringify(want)}`);
});

await check("anthropic", "forced tool use and tool_result", async () => {
  const messages = [user("What is the weather in Oslo?")];
  const body = { model, max_tokens: 200, thinking: noThinking, temperature: 0, tools: [weatherTool], tool_choice: { type: "tool", name: "get_weather" } };
  const m = await client.messages.create({ ...body, messages });
  checkMessage(m);
  assert(m.stop_reason === "tool_use", `stop_reason ${m.stop_reason}`);
  const call = m.content.find((b) => b.type === "tool_use");
  checkWeatherCall(call);
  messages.push({ role: "assistant", content: m.content });
  for (const result of [
    { type: "tool_result", tool_use_id: call.id, content: "Sunny, 21 C" },
    { type: "tool_result", tool_use_id: call.id, content: [{ type: "text", text: "city not found" }], is_error: true },
  ]) {
    const next = await client.messages.create({ ...body, tool_choice: { type: "auto" }, max_tokens: 8, messages: [...messages, { role: "user", content: [result] }] });
    checkMessage(next);
  }
  return JSON.stringify(call.input);
});

await check("anthropic", "stream tool use", async () => {
  const stream = client.messages.stream({
    model, max_tokens: 200, thinking: noThinking, temperature: 0, tools: [weatherTool], tool_choice: { type: "any" },
    messages: [user("What is the weather in Oslo?")],
  });
  let json = "";
  stream.on("inputJson", (partial) => (json += partial));
  const m = await stream.finalMessage();
  assert(m.stop_reason === "tool_use", `stop_reason ${m.stop_reason}`);
  const call = m.content.find((b) => b.type === "tool_use");
  checkWeatherCall(call);
  assert(JSON.stringify(JSON.parse(json)) === JSON.stringify(call.input), `input_json_delta ${json} vs ${JSON.stringify(call.input)}`);
});

await check("anthropic", "thinking with signature", async () => {
  const body = { model, max_tokens: 200, thinking: { type: "enabled", budget_tokens: 16 }, tools: [weatherTool], tool_choice: { type: "tool", name: "get_weather" } };
  const messages = [user("What is the weather in Oslo?")];
  const m = await client.messages.create({ ...body, messages });
  checkMessage(m);
  const th = m.content[0];
  assert(th?.type === "thinking" && typeof th.thinking === "string" && th.thinking.length > 0, `content ${JSON.stringify(m.content).slice(0, 300)}`);
  assert(typeof th.signature === "string" && th.signature.length > 20, `signature ${th.signature}`);
  const call = m.content.find((b) => b.type === "tool_use");
  checkWeatherCall(call);
  // Sent back signed, the thinking is in the prompt; forged, it is left out.
  const turn = (blocks) => [...messages, { role: "assistant", content: blocks }, { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "Sunny" }] }];
  const signed = await client.messages.countTokens({ model, thinking: body.thinking, tools: body.tools, messages: turn(m.content) });
  const forged = await client.messages.countTokens({ model, thinking: body.thinking, tools: body.tools, messages: turn([{ ...th, signature: "forged" }, call]) });
  assert(signed.input_tokens > forged.input_tokens, `signed ${signed.input_tokens} tokens, forged ${forged.input_tokens}`);
  const next = await client.messages.create({ ...body, tool_choice: { type: "auto" }, max_tokens: 8, messages: turn(m.content) });
  checkMessage(next);
  const stream = client.messages.stream({ ...body, max_tokens: 8, tool_choice: { type: "auto" }, messages: turn([{ ...th, signature: "forged" }, call]) });
  const s = await stream.finalMessage();
  checkMessage(s);
  return `signed ${signed.input_tokens}, forged ${forged.input_tokens}`;
});

await check("anthropic", "stream thinking", async () => {
  const stream = client.messages.stream({ model, max_tokens: 24, thinking: { type: "enabled", budget_tokens: 8 }, messages: [user("Think.")] });
  let thinking = "";
  let signature = "";
  stream.on("thinking", (delta) => (thinking += delta));
  stream.on("signature", (sig) => (signature = sig));
  const m = await stream.finalMessage();
  const th = m.content[0];
  assert(th?.type === "thinking" && th.thinking === thinking && th.signature === signature && signature.length > 20, `content ${JSON.stringify(m.content).slice(0, 300)}`);
});

await check("anthropic", "countTokens", async () => {
  const body = { model, thinking: noThinking, system: "You are terse.", messages: [user("Hello there")] };
  const c = await client.messages.countTokens(body);
  assert(Number.isInteger(c.input_tokens) && c.input_tokens > 5, `count ${JSON.stringify(c)}`);
  const m = await client.messages.create({ ...body, max_tokens: 2 });
  const u = m.usage;
  assert(u.input_tokens + u.cache_read_input_tokens === c.input_tokens, `usage ${JSON.stringify(u)}, count ${c.input_tokens}`);
  return `${c.input_tokens} tokens`;
});

// running reads the vllm:num_requests_running gauge.
async function running() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("vllm:num_requests_running{"));
  assert(line, "no vllm:num_requests_running in /metrics");
  return Number(line.split(" ").pop());
}

await check("anthropic", "stream abort frees the sequence", async () => {
  const stream = client.messages.stream({ model, max_tokens: 3000, thinking: noThinking, messages: [user("Go on and on.")] });
  let aborted = false;
  stream.on("text", () => {
    if (!aborted) {
      aborted = true;
      stream.abort();
    }
  });
  try {
    await stream.finalMessage();
  } catch (e) {
    assert(e instanceof Anthropic.APIUserAbortError, `aborting threw ${e?.constructor?.name}: ${e}`);
  }
  assert(aborted, "no text before the end");
  const t0 = Date.now();
  while ((await running()) > 0) {
    assert(Date.now() - t0 < 3000, "the aborted request still runs after 3 s");
    await new Promise((r) => setTimeout(r, 20));
  }
  return `freed in ${Date.now() - t0} ms`;
});

await check("anthropic", "error classes", async () => {
  const classes = [];
  for (const [params, cls] of [
    [{ model, max_tokens: 0, messages: [user("x")] }, Anthropic.BadRequestError],
    [{ model, max_tokens: 4, messages: [{ role: "tool", content: "x" }] }, Anthropic.BadRequestError],
    [{ model: "no-such-model", max_tokens: 4, messages: [user("x")] }, Anthropic.NotFoundError],
  ]) {
    try {
      await client.messages.create(params);
      throw new Error(`no error for ${JSON.stringify(params)}`);
    } catch (e) {
      assert(e instanceof cls, `${JSON.stringify(params)}: got ${e?.constructor?.name}: ${e}`);
      assert(e.error?.type === "error" && typeof e.error?.error?.message === "string", `error body ${JSON.stringify(e.error)}`);
      classes.push(`${e.status} ${e.error.error.type}`);
    }
  }
  return classes.join(", ");
});

finish();
