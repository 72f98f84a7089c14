// sdk.test.mjs drives `govinfer serve` through three JavaScript SDKs as an
// application would: the official OpenAI SDK (chat.completions.create,
// stream, parse, runTools, abort), the Vercel AI SDK with its
// OpenAI-compatible provider (generateText, streamText, tools with
// toolChoice, a multi-step tool loop, generateObject, abort) and LangChain
// (ChatOpenAI invoke, stream, bindTools with tool_choice,
// withStructuredOutput in both methods, reasoning_content).
//
// GOVINFER_BASE_URL is the server (http://host:port) and GOVINFER_MODEL its
// model id. The server runs a random checkpoint, so the checks are about
// the API, never about the text: shapes, finish reasons, tool calls and
// structured outputs that parse and validate, aborts that free the
// server's sequences. It prints one JSON object, {"results": [...]}, and
// exits 1 if a check failed.
//
// With GOVINFER_RECORD set to a directory, it also writes the body of every
// request the SDKs send there (NNN-sdk-check.json), for the Go test that
// replays them without node (httpapi's TestReplaySDKRequests).
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { assert, base, check, finish, model, recordingFetch } from "./harness.mjs";

globalThis.AI_SDK_LOG_WARNINGS = false; // generateObject is deprecated in AI SDK 7, and still tested

// gauge reads a gauge of /metrics.
async function gauge(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + "{"));
  assert(line, `no ${name} in /metrics`);
  return Number(line.split(" ").pop());
}

// idle waits until the server runs and queues nothing and returns how long
// that took.
async function idle(limitMs = 3000) {
  const t0 = Date.now();
  for (;;) {
    const running = await gauge("vllm:num_requests_running");
    const waiting = await gauge("vllm:num_requests_waiting");
    if (running === 0 && waiting === 0) return Date.now() - t0;
    assert(Date.now() - t0 < limitMs, `still ${running} running and ${waiting} waiting after ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

// The weather tool: every JSON type, nesting, enums and bounds.
const Weather = z.object({
  city: z.string().min(2).max(20),
  days: z.number().int().min(1).max(7),
  units: z.enum(["celsius", "fahrenheit"]),
  hourly: z.boolean(),
  where: z.object({ lat: z.number().min(-90).max(90), lon: z.number().min(-180).max(180) }),
  fields: z.array(z.enum(["temp", "wind", "rain"])).min(1).max(3),
});
const weatherJSON = z.toJSONSchema(Weather);
delete weatherJSON.$schema;
const weatherTool = { type: "function", function: { name: "get_weather", description: "Weather forecast for a city", parameters: weatherJSON } };
const user = (content) => [{ role: "user", content }];
const long = { max_tokens: 1500, ignore_eos: true, temperature: 0 };

// ---------------------------------------------------------------- OpenAI
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, fetch: recordingFetch });

await check("openai", "chat.completions.create", async () => {
  const r = await openai.chat.completions.create({ model, messages: user("Hello"), max_tokens: 16 });
  const m = r.choices[0].message;
  assert(typeof m.content === "string" && m.content.length > 0, `content ${JSON.stringify(m.content)}`);
  assert(r.usage.completion_tokens > 0 && r.usage.completion_tokens_details?.reasoning_tokens === 0, `usage ${JSON.stringify(r.usage)}`);
  return `finish ${r.choices[0].finish_reason}`;
});

await check("openai", "stream with usage", async () => {
  const s = await openai.chat.completions.create({ model, messages: user("Hello"), max_tokens: 12, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage;
  for await (const c of s) {
    text += c.choices[0]?.delta?.content ?? "";
    if (c.usage) usage = c.usage;
  }
  assert(text.length > 0 && usage?.completion_tokens > 0, `text ${JSON.stringify(text)}, usage ${JSON.stringify(usage)}`);
  return `${usage.completion_tokens} tokens`;
});

await check("openai", "logprobs, stop, seed, n", async () => {
  const req = { model, messages: user("Count"), max_tokens: 8, logprobs: true, top_logprobs: 2, seed: 7, n: 2, stop: ["\n\n\n"] };
  const a = await openai.chat.completions.create(req);
  const b = await openai.chat.completions.create(req);
  assert(a.choices.length === 2, `${a.choices.length} choices`);
  assert(a.choices[0].logprobs.content[0].top_logprobs.length === 2, "top_logprobs");
  assert(a.choices[0].message.content === b.choices[0].message.content, "the same seed gave different text");
});

await check("openai", "error classes", async () => {
  const errs = [];
  for (const [req, cls] of [
    [{ model, messages: user("Hi"), temperature: 2.5 }, OpenAI.BadRequestError],
    [{ model: "no-such-model", messages: user("Hi") }, OpenAI.NotFoundError],
  ]) {
    try {
      await openai.chat.completions.create(req);
      errs.push("no error");
    } catch (e) {
      if (!(e instanceof cls)) errs.push(`${e.constructor.name} for ${cls.name}`);
    }
  }
  assert(errs.length === 0, errs.join("; "));
});

await check("openai", "models.retrieve", async () => {
  const m = await openai.models.retrieve(model);
  assert(m.id === model, `id ${m.id}`);
});

await check("openai", "developer role", async () => {
  const r = await openai.chat.completions.create({ model, messages: [{ role: "developer", content: "Be brief." }, ...user("Hi")], max_tokens: 4 });
  assert(r.choices.length === 1, "no choice");
});

await check("openai", "tool_choice required", async () => {
  const r = await openai.chat.completions.create({ model, messages: user("Weather in Oslo?"), tools: [weatherTool], tool_choice: "required", max_tokens: 300 });
  const c = r.choices[0];
  assert(c.finish_reason === "tool_calls", `finish_reason ${c.finish_reason}`);
  const args = JSON.parse(c.message.tool_calls[0].function.arguments);
  Weather.parse(args);
  return c.message.tool_calls[0].function.arguments;
});

await check("openai", "runTools", async () => {
  let called;
  const runner = openai.chat.completions.runTools({
    model, messages: user("Weather in Oslo?"), max_tokens: 300,
    tools: [zodFunction({ name: "get_weather", parameters: Weather, function: async (args) => { called = args; return { temperature: 21 }; } })],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  await runner.finalChatCompletion();
  assert(called, "the tool never ran");
  Weather.parse(called);
  return JSON.stringify(called);
});

await check("openai", "chat.completions.parse", async () => {
  const r = await openai.chat.completions.parse({ model, messages: user("Weather in Oslo?"), response_format: zodResponseFormat(Weather, "weather"), max_tokens: 300 });
  const parsed = r.choices[0].message.parsed;
  assert(parsed, `nothing parsed: ${r.choices[0].message.content}`);
  Weather.parse(parsed);
  return JSON.stringify(parsed);
});

await check("openai", "parse with a strict tool", async () => {
  const r = await openai.chat.completions.parse({
    model, messages: user("Weather in Oslo?"), max_tokens: 300,
    tools: [zodFunction({ name: "get_weather", parameters: Weather })], tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const call = r.choices[0].message.tool_calls[0];
  Weather.parse(call.function.parsed_arguments);
});

await check("openai", "reasoning fields", async () => {
  const r = await openai.chat.completions.create({ model, messages: user("Think."), max_tokens: 8, reasoning_effort: "high", ignore_eos: true });
  const m = r.choices[0].message;
  assert(m.reasoning && m.reasoning === m.reasoning_content, `reasoning ${JSON.stringify(m.reasoning)}, reasoning_content ${JSON.stringify(m.reasoning_content)}`);
  assert(r.usage.completion_tokens_details.reasoning_tokens > 0, `usage ${JSON.stringify(r.usage)}`);
});

await check("openai", "abort a stream", async () => {
  const ac = new AbortController();
  const s = await openai.chat.completions.create({ model, messages: user("Go on"), stream: true, ...long }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const _ of s) {
      if (++n === 3) ac.abort();
    }
  } catch (e) {
    assert(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", `${e}`);
  }
  return `freed in ${await idle()} ms`;
});

await check("openai", "abort a request", async () => {
  await idle();
  const ac = new AbortController();
  const p = openai.chat.completions.create({ model, messages: user("Go on"), ...long }, { signal: ac.signal });
  const t0 = Date.now();
  while ((await gauge("vllm:num_requests_running")) === 0) {
    assert(Date.now() - t0 < 3000, "the request never ran");
  }
  ac.abort();
  await p.then(() => { throw new Error("finished despite the abort"); }, () => {});
  return `freed in ${await idle()} ms`;
});

// ------------------------------------------------------------- Vercel AI
const provider = createOpenAICompatible({ name: "govinfer", baseURL: `${base}/v1`, apiKey: "none", includeUsage: true, supportsStructuredOutputs: true,
  fetch: recordingFetch });
const aiModel = provider(model);
const weatherAITool = tool({ description: "Weather forecast for a city", inputSchema: Weather, execute: async () => ({ temperature: 21 }) });

await check("ai", "generateText", async () => {
  const r = await generateText({ model: aiModel, prompt: "Hello", maxOutputTokens: 16, maxRetries: 0 });
  assert(typeof r.text === "string" && r.text.length > 0, `text ${JSON.stringify(r.text)}`);
  assert(r.usage.outputTokens > 0, `usage ${JSON.stringify(r.usage)}`);
});

await check("ai", "streamText", async () => {
  const r = streamText({ model: aiModel, prompt: "Hello", maxOutputTokens: 12, maxRetries: 0 });
  let text = "";
  for await (const t of r.textStream) text += t;
  assert(text.length > 0, "no text");
  assert((await r.usage).outputTokens > 0, "no usage");
});

await check("ai", "tools with toolChoice", async () => {
  const r = await generateText({ model: aiModel, prompt: "Weather in Oslo?", tools: { get_weather: weatherAITool },
    toolChoice: { type: "tool", toolName: "get_weather" }, maxOutputTokens: 300, maxRetries: 0 });
  assert(r.finishReason === "tool-calls", `finishReason ${r.finishReason}`);
  Weather.parse(r.toolCalls[0].input);
  assert(r.toolResults[0].output.temperature === 21, "no tool result");
});

await check("ai", "multi-step tool loop", async () => {
  const r = await generateText({
    model: aiModel, prompt: "Weather in Oslo?", tools: { get_weather: weatherAITool }, maxOutputTokens: 300, maxRetries: 0,
    stopWhen: stepCountIs(3),
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? { type: "tool", toolName: "get_weather" } : "none" }),
  });
  assert(r.steps.length === 2, `${r.steps.length} steps`);
  assert(r.steps[0].toolResults.length === 1, "the first step ran no tool");
  assert(typeof r.text === "string", "no final text");
});

await check("ai", "generateObject", async () => {
  const r = await generateObject({ model: aiModel, schema: Weather, prompt: "Weather in Oslo?", maxOutputTokens: 300, maxRetries: 0 });
  Weather.parse(r.object);
  return JSON.stringify(r.object);
});

await check("ai", "abort", async () => {
  await idle();
  const ac = new AbortController();
  const r = streamText({ model: aiModel, prompt: "Go on", maxOutputTokens: 1500, abortSignal: ac.signal, maxRetries: 0,
    providerOptions: { govinfer: { ignore_eos: true } } });
  let n = 0;
  try {
    for await (const _ of r.textStream) {
      if (++n === 3) ac.abort();
    }
  } catch {
    // the abort
  }
  return `freed in ${await idle()} ms`;
});

// ------------------------------------------------------------- LangChain
const lc = new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${base}/v1`, fetch: recordingFetch }, maxTokens: 16, maxRetries: 0 });
const lcTools = new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${base}/v1`, fetch: recordingFetch }, maxTokens: 300, maxRetries: 0 });

await check("langchain", "invoke", async () => {
  const r = await lc.invoke("Hello");
  assert(typeof r.content === "string" && r.content.length > 0, `content ${JSON.stringify(r.content)}`);
});

await check("langchain", "stream", async () => {
  let text = "";
  for await (const c of await lc.stream("Hello")) text += c.content;
  assert(text.length > 0, "no text");
});

await check("langchain", "bindTools with tool_choice", async () => {
  const r = await lcTools.bindTools([weatherTool], { tool_choice: "get_weather" }).invoke("Weather in Oslo?");
  assert(r.tool_calls?.length === 1, `tool_calls ${JSON.stringify(r.tool_calls)}`);
  Weather.parse(r.tool_calls[0].args);
});

for (const method of ["jsonSchema", "functionCalling"]) {
  await check("langchain", `withStructuredOutput ${method}`, async () => {
    const r = await lcTools.withStructuredOutput(Weather, { method, name: "weather" }).invoke("Weather in Oslo?");
    Weather.parse(r);
  });
}

await check("langchain", "reasoning_content", async () => {
  const thinking = new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${base}/v1`, fetch: recordingFetch }, maxTokens: 8, maxRetries: 0,
    modelKwargs: { chat_template_kwargs: { enable_thinking: true }, ignore_eos: true } });
  const r = await thinking.invoke("Think.");
  assert(r.additional_kwargs.reasoning_content, `additional_kwargs ${JSON.stringify(r.additional_kwargs)}`);
});

finish();
