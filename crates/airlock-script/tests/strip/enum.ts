let a = 1;
enum Color { Red, Green }
