declare function f(x: unknown): unknown;
const t = f as unknown as (x: unknown) => unknown;
(async () => 1)();
const n = t!
+ 1;
n
