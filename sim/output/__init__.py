"""The results: the recorder's tables, GPU usage accounts, time series, the summary, the
files a run writes (atomically, into folders it marks), plots and the HTML report."""
