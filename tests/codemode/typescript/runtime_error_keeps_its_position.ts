// expect-status: error
// expect-code: script_error
// expect-line: 8
// expect-column: 30
interface Config { retries: number }
const config: Config = { retries: 3 } as Config;
function fail<T extends object>(value: T): never {
  const missing: any = null; missing.retries;
  throw new Error("unreachable");
}
fail<Config>(config);
