// The benchmarks that drive a browser (scripts/bench-cold-load.sh): the
// test config's browser, another folder, never part of the test run.
import { defineConfig } from "@playwright/test";
import base from "./playwright.config";

export default defineConfig({ ...base, testDir: "./bench", timeout: 300_000 });
