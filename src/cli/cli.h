/* Subcommands of the `mrcnn` binary. Each returns the process exit code. */
#ifndef MRCNN_CLI_H
#define MRCNN_CLI_H

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); // argv[0] is the command name
    const char *summary;
} mrcnn_command;

int mrcnn_cmd_version(int argc, char **argv);
int mrcnn_cmd_eval(int argc, char **argv);
int mrcnn_cmd_config(int argc, char **argv);
int mrcnn_cmd_bench(int argc, char **argv);
int mrcnn_cmd_train(int argc, char **argv);
int mrcnn_cmd_predict(int argc, char **argv);
int mrcnn_cmd_plot(int argc, char **argv);

#endif
