// responses.test.mjs drives `govinfer serve`'s Responses API
// (/v1/responses) through the official OpenAI SDK (responses.create,
// responses.stream, function calls and their outputs, previous_response_id,
// structured output, errors, retrieve and delete) and the OpenAI Agents SDK
// (an Agent with one tool, run through the Responses API).
//
// GOVINFER_BASE_URL is the server (http://host:port) and GOVINFER_MODEL its
// model id. The server runs a random checkpoint, so the checks are about
// the protocol, never about the text. It prints one JSON object,
// {"results": [...]}, as sdk.test.mjs does, and exits 1 if a check failed.
import OpenAI from "openai";
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import { assert, base, check, finish, model, recordingFetch } from "./harness.mjs";


const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000, fetch: recordingFetch });
const SDK = "openai-responses";
// No reasoning: the random model would think to the end of every answer.
const noThinking = { effort: "none" };

const weatherTool = {
  type: "function",
  name: "get_weather",
  description: "The weather of a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
};

function checkResponse(r) {
  assert(typeof r.id === "string" && r.id.startsWith("resp_"), `id ${r.id}`);
  assert(r.object === "response", `object ${r.object}`);
  assert(["completed", "incomplete"].includes(r.status), `status ${r.status}`);
  assert(Array.isArray(r.output), "output is not an array");
  assert(r.usage && r.usage.input_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, `usage ${JSON.stringify(r.usage)}`);
  assert(typeof r.usage.input_tokens_details?.cached_tokens === "number", "no input_tokens_details.cached_tokens");
}

await check(SDK, "responses.create text", async () => {
  const r = await client.responses.create({
    model,
    input: "Say hello.",
    instructions: "You are brief.",
    max_output_tokens: 16,
    temperature: 0,
    reasoning: noThinking,
    metadata: { run: "sdk" },
  });
  checkResponse(r);
  const msg = r.output.find((o) => o.type === "message");
  assert(msg && msg.role === "assistant" && msg.content[0].type === "output_text", `output ${JSON.stringify(r.output)}`);
  assert(typeof r.output_text === "string" && r.output_text === msg.content[0].text, "output_text differs from the message");
  assert(r.metadata?.run === "sdk", "metadata not echoed");
  return `${r.status}, ${r.usage.output_tokens} tokens`;
});

await check(SDK, "responses.create max_output_tokens incomplete", async () => {
  const r = await client.responses.create({ model, input: "Go on and on.", max_output_tokens: 3, reasoning: noThinking, ignore_eos: true });
  assert(r.status === "incomplete" && r.incomplete_details?.reason === "max_output_tokens", `status ${r.status} ${JSON.stringify(r.incomplete_details)}`);
  assert(r.usage.output_tokens === 3, `output tokens ${r.usage.output_tokens}`);
});

await check(SDK, "responses.stream", async () => {
  const stream = client.responses.stream({ model, input: "Tell a story.", max_output_tokens: 12, reasoning: noThinking, ignore_eos: true });
  const types = [];
  let deltas = "";
  let lastSeq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert(ev.sequence_number > lastSeq, `sequence_number ${ev.sequence_number} after ${lastSeq}`);
    lastSeq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
  }
  const final = await stream.finalResponse();
  assert(types[0] === "response.created" && types[1] === "response.in_progress", `starts ${types.slice(0, 2)}`);
  assert(["response.completed", "response.incomplete"].includes(types.at(-1)), `ends ${types.at(-1)}`);
  for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done"]) {
    assert(types.includes(t), `no ${t}`);
  }
  assert(deltas.length > 0 && final.output_text === deltas, `deltas ${JSON.stringify(deltas)} vs ${JSON.stringify(final.output_text)}`);
  return `${types.length} events`;
});

await check(SDK, "forced function call round trip", async () => {
  const input = [{ role: "user", content: "What is the weather in Paris?" }];
  const r = await client.responses.create({
    model,
    input,
    tools: [weatherTool],
    tool_choice: { type: "function", name: "get_weather" },
    max_output_tokens: 80,
    reasoning: noThinking,
  });
  checkResponse(r);
  const call = r.output.find((o) => o.type === "function_call");
  assert(call && call.name === "get_weather" && call.call_id, `output ${JSON.stringify(r.output)}`);
  const args = JSON.parse(call.arguments);
  assert(typeof args.city === "string", `arguments ${call.arguments}`);
  const r2 = await client.responses.create({
    model,
    input: [...input, ...r.output, { type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ sky: "sunny" }) }],
    tools: [weatherTool],
    max_output_tokens: 8,
    reasoning: noThinking,
  });
  checkResponse(r2);
  assert(r2.usage.input_tokens > r.usage.input_tokens, "the second turn's prompt is not longer");
  return `city ${JSON.stringify(args.city)}`;
});

await check(SDK, "previous_response_id caches the prefix", async () => {
  const instructions = "You answer in one word. ".repeat(30);
  const r1 = await client.responses.create({ model, instructions, input: "Name a colour.", max_output_tokens: 6, reasoning: noThinking });
  checkResponse(r1);
  const r2 = await client.responses.create({
    model,
    instructions,
    previous_response_id: r1.id,
    input: "And another?",
    max_output_tokens: 6,
    reasoning: noThinking,
  });
  checkResponse(r2);
  assert(r2.previous_response_id === r1.id, "previous_response_id not echoed");
  assert(r2.usage.input_tokens_details.cached_tokens > 0, `no cached tokens: ${JSON.stringify(r2.usage)}`);
  const got = await client.responses.retrieve(r2.id);
  assert(got.id === r2.id && got.output_text === r2.output_text, "retrieve differs");
  const del = await client.responses.delete(r2.id);
  assert(del === undefined || del === null || del.deleted === true || typeof del === "object", `delete ${JSON.stringify(del)}`);
  let notFound = false;
  try {
    await client.responses.retrieve(r2.id);
  } catch (e) {
    notFound = e instanceof OpenAI.NotFoundError;
  }
  assert(notFound, "a deleted response is still found");
  return `${r2.usage.input_tokens_details.cached_tokens} of ${r2.usage.input_tokens} cached`;
});

await check(SDK, "structured output json_schema", async () => {
  const schema = {
    type: "object",
    properties: { ok: { type: "boolean" }, n: { type: "integer" } },
    required: ["ok", "n"],
    additionalProperties: false,
  };
  let finished = 0;
  for (let seed = 0; seed < 4 && finished === 0; seed++) {
    const r = await client.responses.create({
      model,
      input: "Give me JSON.",
      text: { format: { type: "json_schema", name: "answer", schema, strict: true } },
      max_output_tokens: 120,
      temperature: 1,
      seed,
      reasoning: noThinking,
    });
    checkResponse(r);
    if (r.status !== "completed") continue;
    finished++;
    const v = JSON.parse(r.output_text);
    assert(typeof v.ok === "boolean" && Number.isInteger(v.n), `value ${r.output_text}`);
    assert(Object.keys(v).every((k) => k === "ok" || k === "n"), `extra keys ${r.output_text}`);
  }
  assert(finished > 0, "no constrained output finished");
});

await check(SDK, "errors", async () => {
  let err;
  try {
    await client.responses.create({ model, input: "hi", previous_response_id: "resp_does_not_exist", max_output_tokens: 2 });
  } catch (e) {
    err = e;
  }
  assert(err instanceof OpenAI.BadRequestError, `got ${err}`);
  assert(err.status === 400 && err.param === "previous_response_id", `status ${err.status} param ${err.param}`);
  assert(String(err.message).includes("resp_does_not_exist"), `message ${err.message}`);
  err = undefined;
  try {
    await client.responses.create({ model, input: "hi", background: true });
  } catch (e) {
    err = e;
  }
  assert(err instanceof OpenAI.BadRequestError && err.param === "background", `background: ${err}`);
});

// The OpenAI Agents SDK, on the Responses API of the same server; tracing
// off, so that nothing leaves the machine.
setTracingDisabled(true);
setOpenAIAPI("responses");
setDefaultOpenAIClient(new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 }));

await check("openai-agents", "Agent with a tool, run()", async () => {
  let calls = 0;
  const getWeather = tool({
    name: "get_weather",
    description: "The weather of a city",
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls++;
      return `Sunny in ${city}`;
    },
  });
  const agent = new Agent({
    name: "weather",
    instructions: "You tell the weather.",
    model,
    tools: [getWeather],
    // Forced, then stop on the tool's result: the random model cannot end the loop itself.
    modelSettings: { toolChoice: "required", maxTokens: 80, reasoning: noThinking },
    toolUseBehavior: "stop_on_first_tool",
  });
  const result = await run(agent, "What is the weather in Paris?", { maxTurns: 3 });
  assert(calls === 1, `tool called ${calls} times`);
  assert(typeof result.finalOutput === "string" && result.finalOutput.startsWith("Sunny in"), `final output ${result.finalOutput}`);
  const items = result.newItems.map((i) => i.type);
  assert(items.includes("tool_call_item") && items.includes("tool_call_output_item"), `items ${items}`);
  return `final output ${JSON.stringify(result.finalOutput)}`;
});

await check("openai-agents", "Agent run() streamed", async () => {
  const agent = new Agent({ name: "plain", instructions: "Be brief.", model, modelSettings: { maxTokens: 8, reasoning: noThinking } });
  const result = await run(agent, "Say hi.", { stream: true, maxTurns: 1 });
  let events = 0;
  for await (const ev of result) {
    if (ev.type === "raw_model_stream_event") events++;
  }
  await result.completed;
  assert(events > 0, "no raw model stream events");
  assert(typeof result.finalOutput === "string", `final output ${result.finalOutput}`);
  return `${events} raw events`;
});

finish();
