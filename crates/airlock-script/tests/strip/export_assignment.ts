const a: number = 1;
export = a;
