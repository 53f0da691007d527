#pragma once

namespace strata {

// Note [graceful stop]: SIGTERM or SIGINT asks a training process to stop at the next
// step boundary instead of dying wherever it is. A checkpoint being written is
// finished first, so no step-N.tmp folder is left behind; a signal repeated a second
// or more later ends the process at once (the default action). The trainer checks the flag between
// steps and all ranks agree on it through one all-reduce, so they stop at the same step.
void install_stop_handlers();
// The signal that asked for a stop (SIGTERM, SIGINT), or 0.
int stop_requested();

}  // namespace strata
