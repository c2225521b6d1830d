// Runs in the run context before the script, with the host's two native
// functions. It leaves the script ECMAScript's intrinsics, frozen, and three
// exits: `codemode.*`, `console.*` and the script's value. The run context
// has no Eval intrinsic, so every way from a string to code already throws;
// the constructors are replaced here too, as a second wall.
(function (host) {
  "use strict";
  const hostCall = host.call;
  const hostLog = host.log;
  const toolNames = host.tools;
  const seed = host.seed;
  const startMs = host.now;

  const {
    freeze, getPrototypeOf, getOwnPropertyDescriptors, defineProperty, create,
  } = Object;
  const ownKeys = Reflect.ownKeys;
  const apply = Reflect.apply;
  const construct = Reflect.construct;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const RealDate = Date;
  const RealError = Error;
  const RealTypeError = TypeError;
  const RealPromise = Promise;
  const RealMap = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const mapHas = Map.prototype.has;
  const StringOf = String;
  const arrayMap = Array.prototype.map;
  const arrayJoin = Array.prototype.join;

  // 1. No code from strings. `Function` and the hidden constructors of
  // async, generator and async generator functions, and `eval`.
  const refuse = function () {
    throw new RealTypeError("code mode: making code from a string is not allowed");
  };
  const hidden = [
    getPrototypeOf(function () {}),
    getPrototypeOf(async function () {}),
    getPrototypeOf(function* () {}),
    getPrototypeOf(async function* () {}),
  ];
  for (const proto of hidden) {
    defineProperty(proto, "constructor", {
      value: refuse, writable: false, enumerable: false, configurable: false,
    });
  }
  defineProperty(refuse, "prototype", {
    value: hidden[0], writable: false, enumerable: false, configurable: false,
  });
  defineProperty(globalThis, "Function", {
    value: refuse, writable: false, enumerable: false, configurable: false,
  });
  delete globalThis.eval;

  // 2. V8's stack API hands out the function object of every frame.
  for (const name of ["prepareStackTrace", "captureStackTrace", "stackTraceLimit"]) {
    delete RealError[name];
  }
  // Shared memory and GC-timed callbacks: not deterministic, not needed.
  for (const name of ["SharedArrayBuffer", "Atomics", "WeakRef", "FinalizationRegistry"]) {
    delete globalThis[name];
  }

  // 3. Time and chance, seeded by the host and recorded with the run.
  let s0 = (seed >>> 0) | 1;
  let s1 = ((seed / 4294967296) >>> 0) ^ 0x9e3779b9;
  const random = function random() {
    // xorshift64 over two 32-bit halves, 53 bits out.
    let x = s0, y = s1;
    s0 = y;
    x ^= x << 23; x ^= x >>> 17; x ^= y ^ (y >>> 26);
    s1 = x;
    const hi = (s0 >>> 5) >>> 0, lo = (s1 >>> 6) >>> 0;
    return (hi * 67108864 + lo) / 9007199254740992;
  };
  defineProperty(Math, "random", {
    value: random, writable: false, enumerable: false, configurable: false,
  });
  const SeededDate = function Date(...args) {
    if (new.target === undefined) {
      return apply(RealDate.prototype.toString, new RealDate(startMs), []);
    }
    return construct(RealDate, args.length === 0 ? [startMs] : args, new.target);
  };
  defineProperty(SeededDate, "prototype", {
    value: RealDate.prototype, writable: false, enumerable: false, configurable: false,
  });
  defineProperty(RealDate.prototype, "constructor", {
    value: SeededDate, writable: false, enumerable: false, configurable: false,
  });
  SeededDate.now = function now() { return startMs; };
  SeededDate.parse = RealDate.parse;
  SeededDate.UTC = RealDate.UTC;
  defineProperty(globalThis, "Date", {
    value: SeededDate, writable: false, enumerable: false, configurable: false,
  });

  // 4. The errors a tool call can end in.
  // `reason` is spec 004's: "denied" (the policy) or
  // "elicitation_unsupported" (it would ask, and nobody can be asked).
  class ToolCallDeniedError extends RealError {
    constructor(tool, code, reason, message) {
      super(`${tool}: ${message === undefined ? reason : message}`);
      defineProperty(this, "name", { value: "ToolCallDeniedError" });
      this.tool = tool;
      this.code = code;
      this.reason = reason;
    }
  }
  class ToolCallError extends RealError {
    constructor(tool, code, message) {
      super(`${tool}: ${message}`);
      defineProperty(this, "name", { value: "ToolCallError" });
      this.tool = tool;
      this.code = code;
    }
  }

  // 5. `codemode.<tool>(args)`: the arguments are serialised here, once;
  // the host sees those bytes and nothing else of the guest's objects.
  const waiting = new RealMap();
  const invoke = function (name, args) {
    const json = stringify(args === undefined ? {} : args);
    if (typeof json !== "string") {
      throw new RealTypeError(`codemode.${name}: the arguments must be a JSON value`);
    }
    const seq = hostCall(name, json);
    if (seq < 0) {
      throw new RealError("code mode: the run is over its limit of tool calls");
    }
    return new RealPromise(function (resolve, reject) {
      apply(mapSet, waiting, [seq, { resolve, reject }]);
    });
  };
  const codemode = create(null);
  for (const name of toolNames) {
    const call = async function (args) { return invoke(name, args); };
    defineProperty(call, "name", { value: name });
    defineProperty(codemode, name, {
      value: call, writable: false, enumerable: true, configurable: false,
    });
  }
  defineProperty(globalThis, "codemode", {
    value: freeze(codemode), writable: false, enumerable: false, configurable: false,
  });
  defineProperty(globalThis, "ToolCallDeniedError", {
    value: ToolCallDeniedError, writable: false, enumerable: false, configurable: false,
  });
  defineProperty(globalThis, "ToolCallError", {
    value: ToolCallError, writable: false, enumerable: false, configurable: false,
  });

  // The host settles a call: `ok` with the result's JSON, or the refusal.
  const settle = function (seq, kind, payload) {
    const entry = apply(mapGet, waiting, [seq]);
    if (entry === undefined) {
      return;
    }
    apply(mapDelete, waiting, [seq]);
    const value = parse(payload);
    if (kind === "ok") {
      entry.resolve(value);
    } else if (kind === "denied") {
      entry.reject(new ToolCallDeniedError(value.tool, value.code, value.reason, value.message));
    } else {
      entry.reject(new ToolCallError(value.tool, value.code, value.message));
    }
  };

  // 6. console: each line goes to the host as text.
  const show = function (value) {
    if (typeof value === "string") {
      return value;
    }
    try {
      const json = stringify(value);
      if (typeof json === "string") {
        return json;
      }
    } catch (_) {
      // cyclic or BigInt: shown as String() shows it
    }
    return StringOf(value);
  };
  const console = create(null);
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    defineProperty(console, level, {
      value: function (...values) {
        hostLog(level, apply(arrayJoin, apply(arrayMap, values, [show]), [" "]));
      },
      writable: false, enumerable: true, configurable: false,
    });
  }
  defineProperty(globalThis, "console", {
    value: freeze(console), writable: false, enumerable: false, configurable: false,
  });

  // 7. Freeze every intrinsic the script can reach, and the hidden ones.
  const seen = new RealMap();
  const queue = [globalThis, ...hidden, RealError, ToolCallDeniedError, ToolCallError];
  const iterators = [
    [][Symbol.iterator](), new RealMap()[Symbol.iterator](), new Set()[Symbol.iterator](),
    ""[Symbol.iterator](), "".matchAll(/x/g), (function* () {})(), (async function* () {})(),
    (async function () {})(),
  ];
  for (const iterator of iterators) {
    queue.push(getPrototypeOf(iterator));
  }
  queue.push(getPrototypeOf(Int8Array));
  while (queue.length > 0) {
    const value = queue.pop();
    if ((typeof value !== "object" && typeof value !== "function") || value === null) {
      continue;
    }
    if (apply(mapHas, seen, [value])) {
      continue;
    }
    apply(mapSet, seen, [value, true]);
    queue.push(getPrototypeOf(value));
    const descriptors = getOwnPropertyDescriptors(value);
    for (const key of ownKeys(descriptors)) {
      const descriptor = descriptors[key];
      if (value === globalThis && "value" in descriptor) {
        // The global object stays extensible (a script's top-level `var`
        // lives there), its intrinsics do not.
        queue.push(descriptor.value);
        continue;
      }
      if ("value" in descriptor) {
        queue.push(descriptor.value);
      } else {
        queue.push(descriptor.get, descriptor.set);
      }
    }
    if (value !== globalThis) {
      freeze(value);
    }
  }
  const globals = getOwnPropertyDescriptors(globalThis);
  for (const key of ownKeys(globals)) {
    const descriptor = globals[key];
    if (descriptor.configurable) {
      defineProperty(globalThis, key, "value" in descriptor
        ? { writable: false, configurable: false }
        : { configurable: false });
    }
  }
  return settle;
})
