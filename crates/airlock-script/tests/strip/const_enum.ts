const enum Flags { A = 1 }
