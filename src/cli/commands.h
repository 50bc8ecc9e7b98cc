// Subcommands of the `sparrow` binary. Each parses its own flags and
// returns the exit status; InputError escapes to main (exit 2).
#pragma once

namespace sparrow::cli {

int RunCommand(int argc, char** argv);
int BatchCommand(int argc, char** argv);
int ChatCommand(int argc, char** argv);
int ServeCommand(int argc, char** argv);
int PerplexityCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);
int SynthCommand(int argc, char** argv);
int SynthLoraCommand(int argc, char** argv);
int InfoCommand(int argc, char** argv);
int ConvertCommand(int argc, char** argv);
int ProbeIoCommand(int argc, char** argv);
int SimulateCommand(int argc, char** argv);
int TradeoffCommand(int argc, char** argv);
int CalibrateCommand(int argc, char** argv);
int PlaceCommand(int argc, char** argv);

}  // namespace sparrow::cli
