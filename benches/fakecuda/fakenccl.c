int ncclGetVersion(int *v) { *v = 22300; return 0; }
