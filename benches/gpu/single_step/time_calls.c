/* Times N calls of one function of libprobe_sites.so (see single_step.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int f_push(long), f_endbr(long), f_mov(long), f_sub(long), f_nop(long), f_nop5(long), f_movrsp(long);

static const struct {
	const char *name;
	int (*fn)(long);
} functions[] = {
	{ "f_push", f_push }, { "f_endbr", f_endbr }, { "f_mov", f_mov },	{ "f_sub", f_sub },
	{ "f_nop", f_nop },   { "f_nop5", f_nop5 },   { "f_movrsp", f_movrsp },
};

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: time_calls FUNCTION N\n");
		return 2;
	}
	long n = atol(argv[2]);
	for (size_t i = 0; i < sizeof(functions) / sizeof(functions[0]); i++) {
		if (strcmp(functions[i].name, argv[1]))
			continue;
		double start = now_ns();
		for (long k = 0; k < n; k++)
			functions[i].fn(k);
		printf("%.0f\n", (now_ns() - start) / n);
		return 0;
	}
	fprintf(stderr, "unknown function %s\n", argv[1]);
	return 2;
}
