// The web view's build: bundles src/main.js (with cytoscape) and src/style.css with
// esbuild and copies src/index.html, into the Python package's static folder (or the
// folder given).  Run by hatch_build.py after `npm ci`; by hand: `npm run build`.
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || join(here, "../src/fabriclab/api/web/static");
mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: [join(here, "src/main.js"), join(here, "src/style.css")],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2020",
  outdir: out,
  logLevel: "warning",
});
copyFileSync(join(here, "src/index.html"), join(out, "index.html"));
