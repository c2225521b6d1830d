const value: number = await Promise.resolve(1);
return value satisfies number;
