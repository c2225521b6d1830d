const shape = (a: number): {
  value: number;
} => ({ value: a });
shape(2).value
