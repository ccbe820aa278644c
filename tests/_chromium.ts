/**
 * Headless Chromium for browser tests (Debian's `chromium`, driven by
 * `npm:playwright-core`), as tests/browser_test.ts does it: `$LOCKD_CHROMIUM`, else
 * `/usr/bin/chromium`, else `chromium` on `PATH`. Without it the tests are skipped with a
 * loud warning, unless `LOCKD_REQUIRE_BROWSER=1` (set by `.ci/run`): then the suite fails.
 *
 * @module
 */

import { type Browser, chromium } from "npm:playwright-core@1.65.1";

function findChromium(): string | undefined {
  const override = Deno.env.get("LOCKD_CHROMIUM");
  const candidates = override !== undefined ? [override] : ["/usr/bin/chromium"];
  if (override === undefined) {
    for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
      if (dir !== "") candidates.push(`${dir}/chromium`);
    }
  }
  for (const path of candidates) {
    try {
      if (Deno.statSync(path).isFile) return path;
    } catch {
      // Not there.
    }
  }
  return undefined;
}

/** The Chromium binary, if there is one. */
export const CHROMIUM: string | undefined = findChromium();

/**
 * Registers browser tests for `what` (e.g. "the status page"): `Deno.test` that is ignored,
 * with a loud warning on stderr, when Chromium is absent, and a failing test instead when
 * `LOCKD_REQUIRE_BROWSER=1`.
 */
export function browserTests(what: string): (name: string, fn: () => Promise<void>) => void {
  const required = Deno.env.get("LOCKD_REQUIRE_BROWSER") === "1";
  if (CHROMIUM === undefined) {
    const bar = "!".repeat(78);
    console.error(
      `\n${bar}\n!!  Chromium not found (${
        Deno.env.get("LOCKD_CHROMIUM") ?? "/usr/bin/chromium or chromium on PATH"
      }).\n` +
        (required
          ? `!!  LOCKD_REQUIRE_BROWSER=1: the browser tests of ${what} FAIL.\n`
          : `!!  The browser tests of ${what} are SKIPPED.\n` +
            "!!  Install it (apt-get install chromium) to run them; CI requires them.\n") +
        `${bar}\n`,
    );
    if (required) {
      Deno.test(`browser tests of ${what} need Chromium (LOCKD_REQUIRE_BROWSER=1)`, () => {
        throw new Error("Chromium is not installed, and LOCKD_REQUIRE_BROWSER=1 requires it");
      });
    }
  }
  return (name, fn) => Deno.test({ name, ignore: CHROMIUM === undefined, fn });
}

/** Launches headless Chromium with the flags the tests use. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--font-render-hinting=none",
    ],
  });
}
