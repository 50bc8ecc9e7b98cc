// The chat page (GET /) in headless Chromium: type a message, press Enter,
// and see the reply stream in. Environment: SPARROW_URL, SPARROW_API_KEY,
// CHROMIUM (default /usr/bin/chromium).
import { test } from "node:test";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

test("the page streams a reply into the conversation", async () => {
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(process.env.SPARROW_URL + "/", { waitUntil: "load" });
    assert.equal(await page.title(), "Sparrow chat");
    // The server wants a key: set it in the page's settings.
    await page.$eval("#key", (el, key) => { el.value = key; }, process.env.SPARROW_API_KEY);
    await page.$eval("#temperature", (el) => { el.value = "0"; });
    await page.$eval("#max-tokens", (el) => { el.value = "60"; });

    await page.type("#input", "Once upon a time");
    await page.keyboard.press("Enter");
    await page.waitForSelector(".msg.assistant[data-done='true'], .msg.error[data-done='true']", { timeout: 60000 });

    const user = await page.$eval(".msg.user", (el) => el.textContent);
    assert.equal(user, "Once upon a time");
    assert.equal(await page.$(".msg.error"), null, "the page shows an error");
    const reply = await page.$eval(".msg.assistant", (el) => el.textContent);
    assert.ok(reply.length > 20, `short reply: ${JSON.stringify(reply)}`);
    // Streamed: the page applied the reply as many separate events.
    const chunks = Number(await page.$eval(".msg.assistant", (el) => el.dataset.chunks));
    assert.ok(chunks > 5, `the reply arrived in ${chunks} event(s), not streamed`);
    assert.deepEqual(errors, []);

    // A second turn sends the history and gets its own reply.
    await page.type("#input", "Tell me more");
    await page.keyboard.press("Enter");
    await page.waitForFunction(
      () => document.querySelectorAll(".msg[data-done='true']").length === 2, { timeout: 60000 });
    assert.equal(await page.$(".msg.error"), null, "the second turn shows an error");
    assert.equal((await page.$$(".msg.user")).length, 2);
  } finally {
    await browser.close();
  }
});
