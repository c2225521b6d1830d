const raw = JSON.parse("{}") as { a?: number };
const checked = { a: 1 } satisfies Record<string, number>;
const sure = raw!.a!;
const old = <number>(checked.a);
const make = Array<string>;
const list = make<string>("x");
const generic = <T,>(x: T): T => x;
async function* gen<T>(this: Window, items: T[]) { yield* items }
[raw, checked, sure, old, list, generic(1)]
