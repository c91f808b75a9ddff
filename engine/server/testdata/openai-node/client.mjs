// Runs the official OpenAI Node client against a morphlab server: node client.mjs BASE_URL MODEL API_KEY.
// It makes completions and chat requests, streamed and not, reads their usage, lists the models, provokes a 400
// and, with a wrong key, a 401, then prints what it saw as one JSON object for the Go test to check.
import OpenAI from "openai";

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const prompt = "Once upon a time";
const messages = [{ role: "user", content: "Tell me a story." }];
const out = {};

const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
out.completion = { text: c.choices[0].text, finish_reason: c.choices[0].finish_reason, usage: c.usage, object: c.object };

let text = "", finish = null, usage = null, chunks = 0;
const cs = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const ch of cs) {
  chunks++;
  if (ch.choices.length > 0) {
    text += ch.choices[0].text;
    finish = ch.choices[0].finish_reason ?? finish;
  }
  if (ch.usage) usage = ch.usage;
}
out.completion_stream = { text, finish_reason: finish, usage, chunks };

const chat = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 0 });
out.chat = { text: chat.choices[0].message.content, role: chat.choices[0].message.role, finish_reason: chat.choices[0].finish_reason, usage: chat.usage, object: chat.object };

text = ""; finish = null; usage = null; chunks = 0;
const chs = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const ch of chs) {
  chunks++;
  if (ch.choices.length > 0) {
    text += ch.choices[0].delta.content ?? "";
    finish = ch.choices[0].finish_reason ?? finish;
  }
  if (ch.usage) usage = ch.usage;
}
out.chat_stream = { text, finish_reason: finish, usage, chunks };

out.models = [];
for await (const m of client.models.list()) out.models.push(m.id);

try {
  await client.completions.create({ model, prompt, max_tokens: 0 });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, param: e.param ?? null, type: e.type ?? null, name: e.constructor.name };
}

try {
  await new OpenAI({ baseURL, apiKey: apiKey + "-wrong", maxRetries: 0, timeout: 60_000 }).models.list();
  out.auth_error = null;
} catch (e) {
  out.auth_error = { status: e.status, code: e.code ?? null, name: e.constructor.name };
}

console.log(JSON.stringify(out));
