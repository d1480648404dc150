/* cli.h: `s3cached stats|warm|flush` (cli.c). Returns the process exit status. */
#ifndef S3C_CLI_H
#define S3C_CLI_H
int cli_main(const char *cmd, int argc, char **argv);
#endif
