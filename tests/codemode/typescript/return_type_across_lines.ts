// expect-status: completed
// expect-result: {"value": 4}
const shape = (a: number): {
  value: number;
} => ({ value: a * 2 });
return shape(2);
